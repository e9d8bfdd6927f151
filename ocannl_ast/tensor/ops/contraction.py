"""Contractions: compose (OCANNL `*`), einsum with sum accumulation (`++`, `+*`), max
reduction (`@^^`, `@^+`) and concat's spec check; each op's op_asn, grad_asn and logic
side by side. Input: tensors and einsum specs. Output: result Tensors.
"""

# The @cd bodies read inline nodes ({ties_lhs}) and name eq, where (module globals).
# ruff: noqa: F821

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ...errors import ArgumentError, ShapeError, SpecError, user_span
from ...infer.logic import Compose, Einsum
from ...infer.spec_ast import Concat, EinsumSpec, Label, ShapeSpec
from ...infer.spec_parser import parse_spec
from ...rewrite import make_decorator
from .. import validate
from ..builders import accum, block, prim, rev_sides
from ..node import Code, NodeRef, Tensor
from .base import Asn, apply
from .pointwise import eq, where
from .pooling import window_operand
from .spec_checks import check_product_spec

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")


# ---- compose ---------------------------------------------------------------------------------

@cd
def _compose_op(v, v1, v2, projections):
    v[...] = sum(v1 * v2)


@cd
def _compose_grad(g, g1, g2, v1, v2, projections):
    g1 += g * v2
    g2 += v1 * g


def matmul(a: Any, b: Any) -> Tensor:
    """Compose (OCANNL `*`): outputs of b meet inputs of a; the shared axes are summed."""
    return apply("compose", Compose(), _compose_op, _compose_grad, a, b)


# ---- einsum: n-ary sum of products -----------------------------------------------------------

def _product(refs: list[NodeRef]) -> Any:
    out: Any = refs[0]
    for r in refs[1:]:
        out = prim("mul", out, r)
    return out


def _einsum_asns(n: int) -> tuple[Asn, Asn]:
    """op_asn / grad_asn of an n-ary sum of products: the grad of operand k multiplies the
    incoming gradient by every other operand."""
    def op_asn(v: NodeRef, projections: Any, **vs: NodeRef) -> Code:
        return accum(v, "=:+", _product([vs[f"v{i}"] for i in range(1, n + 1)]),
                     projections=projections)

    def grad_asn(g: NodeRef, projections: Any, **gs: NodeRef) -> Code:
        out = Code()
        for k in range(1, n + 1):
            others = [gs[f"v{i}"] for i in range(1, n + 1) if i != k]
            out += accum(gs[f"g{k}"], "=+", _product([g, *others]), projections=projections)
        return out

    names = [f"v{i}" for i in range(1, n + 1)]
    op_asn.__signature__ = _sig(["v", "projections", *names])  # type: ignore[attr-defined]
    grad_names = ["g", "projections", *names, *[f"g{i}" for i in range(1, n + 1)]]
    grad_asn.__signature__ = _sig(grad_names)  # type: ignore[attr-defined]
    return op_asn, grad_asn


def _sig(names: list[str]) -> inspect.Signature:
    P = inspect.Parameter
    return inspect.Signature([P(n, P.KEYWORD_ONLY) for n in names])


_EINSUM_ASNS: dict[int, tuple[Asn, Asn]] = {}


def einsum(spec: str, *tensors: Any, window: Mapping[str, int] | None = None) -> Tensor:
    """Generalized einsum with sum accumulation, 1..n operands (OCANNL `++`, `+*`).

    `window` names labels that index no operand with their sizes (a pooling window, see
    `ops.pooling`): they are summed over, as with a kernel of ones.
    Example: ``einsum("ij;jk=>ik", a, b)`` is a matrix product;
    ``einsum("2*o<+k => o", x, window={"k": 2})`` sums pairs.

    An operand axis of size 1 broadcasts against its label's size (read at position 0),
    as in NumPy and seed 002 ("Pointwise_bin-like broadcasting"); upstream OCANNL uses
    equalities there. Row variables broadcast axis by axis; diagonals and affine labels do
    not broadcast. Its gradient sums over the broadcast axis.
    """
    validate.spec_and_operands("einsum", spec, tensors)
    parsed = parse_spec(spec)
    if window is not None:
        parsed, ones = window_operand(spec, window, 1.0)
        tensors = (*tensors, ones)
    check_product_spec("einsum", parsed)
    n = len(tensors)
    if n not in _EINSUM_ASNS:
        _EINSUM_ASNS[n] = _einsum_asns(n)
    op_asn, grad_asn = _EINSUM_ASNS[n]
    return apply("einsum", Einsum(parsed), op_asn, grad_asn, *tensors)


# ---- einsum_max: max-reduction, tropical ------------------------------------------------------

@cd
def _max_op1(v, v1, projections):
    v[...] = max(v1)


@cd
def _max_grad1(v, g, v1, g1, projections):
    {ties_lhs}[...] = sum(eq(v1, v))  # (declared inline: @cd)
    g1 += where(eq(v1, v), g / ties_lhs, 0.0)


@cd
def _max_op2(v, v1, v2, projections):
    v[...] = max(v1 + v2)


@cd
def _max_grad2(v, g, v1, v2, g1, g2, projections):
    {ties_lhs}[...] = sum(eq(v1 + v2, v))  # (declared inline: @cd)
    g1 += where(eq(v1 + v2, v), g / ties_lhs, 0.0)
    g2 += where(eq(v1 + v2, v), g / ties_lhs, 0.0)


def einsum_max(spec: str, a: Any, b: Any = None, *more: Any,
               window: Mapping[str, int] | None = None) -> Tensor:
    """Max-reduce (OCANNL `@^^`), or with two operands max of a + b (`@^+`, tropical).

    Gradient: each output cell's incoming gradient goes to the positions of the reduction
    that attain its max, split equally among tied positions (k ties get g / k each; in the
    binary form a tied term a[i] + b[j] passes g / k to both a[i] and b[j]), so the
    gradients always sum to the incoming gradient, as JAX and `torch.amax` do. OCANNL gives
    every tied position the full gradient, which double-counts: max(x, x) would get
    gradient 2. Ties are exact float equality with the computed max.
    """
    if more:
        validate.fail(ArgumentError, f"einsum_max takes one or two tensors (a max-reduce, or "
                                     f"the max of a + b), got {2 + len(more)}")
    validate.spec_and_operands("einsum_max", spec, (a,) if b is None else (a, b))
    parsed = parse_spec(spec)
    if window is not None:  # unary pooling: max over a + -0.0 on the window (`ops.pooling`)
        if b is not None:
            raise ShapeError("einsum_max: window= is for the unary form", user_span())
        parsed, zeros = window_operand(spec, window, -0.0)
        check_product_spec("einsum_max", parsed)
        return apply("einsum_max", Einsum(parsed), _max_op2, _max_grad2, a, zeros)
    check_product_spec("einsum_max", parsed)
    if b is None:
        return apply("einsum_max", Einsum(parsed), _max_op1, _max_grad1, a)
    return apply("einsum_max", Einsum(parsed), _max_op2, _max_grad2, a, b)


# ---- concat: a Block forward, a Rev_sides gradient (seed 004) ------------------------------

def _concat_asns(n: int) -> tuple[Asn, Asn]:
    """op_asn: a Block of the n sources into the result (a gap keeps the neutral 0);
    grad_asn: the Rev_sides of the same projections, scattering g back to the sources."""
    def op_asn(v: NodeRef, projections: Any, **vs: NodeRef) -> Code:
        return block(v, "=:+", [vs[f"v{i}"] for i in range(1, n + 1)], projections,
                     label="concat")

    def grad_asn(g: NodeRef, projections: Any, **gs: NodeRef | None) -> Code:
        return rev_sides(g, "=+", [gs[f"g{i}"] for i in range(1, n + 1)], projections,
                         label="concat grad")

    names = [f"v{i}" for i in range(1, n + 1)]
    op_asn.__signature__ = _sig(["v", "projections", *names])  # type: ignore[attr-defined]
    grad_names = ["g", "projections", *[f"g{i}" for i in range(1, n + 1)]]
    grad_asn.__signature__ = _sig(grad_names)  # type: ignore[attr-defined]
    return op_asn, grad_asn


_CONCAT_ASNS: dict[int, tuple[Asn, Asn]] = {}


def concat_asns(n: int) -> tuple[Asn, Asn]:
    """The (cached) Block / Rev_sides pair of an n-source concatenation; stacking
    (`ops.stacking`) shares it."""
    if n not in _CONCAT_ASNS:
        _CONCAT_ASNS[n] = _concat_asns(n)
    return _CONCAT_ASNS[n]


def _axis_labels(ss: ShapeSpec, concat_only: bool) -> set[str]:
    out: set[str] = set()
    for rs in (ss.batch, ss.output, ss.input):
        for ax in (rs.beg + rs.end) if rs is not None else ():
            if isinstance(ax, Concat):
                out.update(c.name for c in ax.components if isinstance(c, Label))
            elif isinstance(ax, Label) and not concat_only:
                out.add(ax.name)
    return out


def _check_sources_placed(spec: EinsumSpec, n: int) -> None:
    """With several sources, each must name a component of a concatenated result axis:
    otherwise it is live at every position and overlaps the others (`a;b=>a^c`)."""
    placed = _axis_labels(spec.result, concat_only=True)
    if n < 2 or not placed:
        return
    for k, ss in enumerate(spec.operands, start=1):
        if not _axis_labels(ss, concat_only=False) & placed:
            raise ShapeError(f'concat "{spec.text}": source {k} names no component of the '
                            f"result's concatenated axes ({' ^ '.join(sorted(placed))}), so "
                            "it would overlap the other sources everywhere; name its "
                            "component in the result (e.g. a;b=>a^b)", user_span())


def concat(spec: str, *tensors: Any) -> Tensor:
    """Concatenation along `^` axes (seed 004), and the rest of its family by the same
    spec language: slices (`a^b => a`), partial placement (`a => a^b`), N-ary, several
    axes (block matrices). The sources' slices must not overlap; gaps stay 0.

    Example: ``concat("a;b=>a^b", x, y)`` is ``np.concatenate([x, y])``.
    """
    validate.spec_and_operands("concat", spec, tensors)
    try:
        parsed = parse_spec(spec)
    except SpecError as e:
        raise e.with_span(user_span()) from None
    _check_sources_placed(parsed, len(tensors))
    op_asn, grad_asn = concat_asns(len(tensors))
    return apply("concat", Einsum(parsed), op_asn, grad_asn, *tensors)
