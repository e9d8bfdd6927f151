"""Ternary operations (issue 21 item 9; OCANNL 0.7's ternary ops): `fma(a, b, c)`, the
compose `a @ b + c` in one accumulation (OCANNL's Compose_accumulate: the result starts
as c, read through a pointwise projection, and a * b is accumulated onto it), and
`einsum3(spec, op, a, b, c)`, a ternary primitive (`where`, `fma`) lined up by a
3-operand einsum spec, summed over the labels the result leaves out.

Input: tensors (or what lifts to them), a spec. Output: result Tensors.
"""

from __future__ import annotations

from typing import Any

from ...errors import ArgumentError, ShapeError, Span, user_span
from ...infer.constraints import Origin
from ...infer.logic import Compose, Einsum, Pointwise, logic_name, shape_constraints
from ...infer.shape import Shape
from .. import validate
from ..builders import PrimCall, accum, prim
from ..node import (
    Code,
    Init,
    NodeKind,
    NodeRef,
    OpRecord,
    StaticIndex,
    Tensor,
    call_asn,
    grad_disabled,
)
from .base import apply, lift
from .elementwise import fma_pointwise
from .with_spec import parse_checked


class _FmaRecord(OpRecord):
    """An fma's operation over (a, b, c), with its two parts: the compose over (a, b) and
    the pointwise read of c, each deriving its own projections (c is read once per result
    cell, outside the contraction)."""

    def __init__(self, result: Tensor, operands: list[Tensor], span: Span | None) -> None:
        super().__init__(Compose(), result, operands, "fma", span)
        self.compose = OpRecord(Compose(), result, operands[:2], "fma", span)
        self.pointwise = OpRecord(Pointwise(), result, operands[2:], "fma (c)", span)


def _parts(rec: OpRecord) -> tuple[OpRecord, OpRecord]:
    assert isinstance(rec, _FmaRecord)
    return rec.compose, rec.pointwise


def _ref(t: Tensor, kind: NodeKind, slot: int) -> NodeRef | None:
    """Slot `slot` of a part record; a gradient nobody needs is None (as `call_asn`)."""
    return NodeRef(t, kind, slot) if kind is NodeKind.VALUE or t.diff else None


def _fma_op(projections: OpRecord) -> Code:
    mm, pw = _parts(projections)
    t, (a, b), (c,) = mm.result, mm.operands, pw.operands
    v = NodeRef(t, NodeKind.VALUE, 0)
    return (accum(v, "=:", NodeRef(c, NodeKind.VALUE, 1), projections=pw, label="fma: c")
            + accum(v, "=+", prim("mul", NodeRef(a, NodeKind.VALUE, 1),
                                  NodeRef(b, NodeKind.VALUE, 2)),
                    projections=mm, label="fma: + a*b"))


def _fma_grad(projections: OpRecord) -> Code:
    mm, pw = _parts(projections)
    t, (a, b), (c,) = mm.result, mm.operands, pw.operands
    g = NodeRef(t, NodeKind.GRAD, 0)
    va, vb = NodeRef(a, NodeKind.VALUE, 1), NodeRef(b, NodeKind.VALUE, 2)
    return (accum(_ref(a, NodeKind.GRAD, 1), "=+", prim("mul", g, vb), projections=mm)
            + accum(_ref(b, NodeKind.GRAD, 2), "=+", prim("mul", va, g), projections=mm)
            + accum(_ref(c, NodeKind.GRAD, 1), "=+", g, projections=pw))


def fma(a: Any, b: Any, c: Any) -> Tensor:
    """`a @ b + c` as one operation (OCANNL's ternary Compose_accumulate): the result has
    the compose's shape (outputs of `b` meet inputs of `a`), `c` broadcasts into it
    pointwise; each cell starts at c's value and the products of the shared axes are
    accumulated onto it, with no intermediate `a @ b` tensor. Gradients reach all three.

    Example: ``oc.fma(w, x, b)`` is a dense layer ``w @ x + b``.

    Inside an operation's own code (`op_asn` / `grad_asn` of `oc.unary_op` and friends),
    over slot references and primitive trees, `fma(v1, v2, v3)` is the pointwise primitive
    `v1 * v2 + v3`: the assignment's projections already say how the operands line up.
    `oc.fma_pointwise` is that pointwise form on tensors.
    """
    if any(isinstance(x, NodeRef | PrimCall | StaticIndex) for x in (a, b, c)):
        return fma_pointwise(a, b, c)
    span = user_span()
    xs = [lift(x) for x in (a, b, c)]
    shape = Shape.make("fma")
    diff = not grad_disabled() and any(o.diff for o in xs)
    t = Tensor("fma", shape, Init.COMPUTED, diff=diff)
    shapes = (shape, *[o.shape for o in xs])
    try:
        for logic, ops in ((Compose(), xs[:2]), (Pointwise(), xs[2:])):
            origin = Origin(f"fma ({logic_name(logic)})", shapes, span)
            shape.solver.add(shape_constraints(logic, shape.solver, shape,
                                               [o.shape for o in ops], origin))
    except ShapeError as e:
        raise e.with_span(span) from None
    t.op = _FmaRecord(t, xs, span)
    t.operands = list(xs)
    t.grad_asn = _fma_grad
    slots = {o.slot for o in xs if o.slot is not None}
    t.slot = slots.pop() if len(slots) == 1 else None
    for o in xs:
        t._fwd.update(o.embed())
    t._own = call_asn(_fma_op, t.op)
    t._fwd[t.id] = t
    return t


# ---- einsum3: a ternary primitive under a 3-operand spec ---------------------------------

def _grads_where(g: Any, v1: Any, v2: Any, v3: Any) -> list[Any]:
    return [None, prim("where", v1, g, 0.0), prim("where", v1, 0.0, g)]


def _grads_fma(g: Any, v1: Any, v2: Any, v3: Any) -> list[Any]:
    return [prim("mul", g, v2), prim("mul", v1, g), g]


_TERNARY = {"where": _grads_where, "fma": _grads_fma}


def _einsum3_asns(op: str) -> tuple[Any, Any]:
    grads = _TERNARY[op]

    def op_asn(v: NodeRef, v1: NodeRef, v2: NodeRef, v3: NodeRef,
               projections: OpRecord) -> Code:
        return accum(v, "=:+", prim(op, v1, v2, v3), projections=projections)

    def grad_asn(g: NodeRef, v1: NodeRef, v2: NodeRef, v3: NodeRef, g1: NodeRef | None,
                 g2: NodeRef | None, g3: NodeRef | None, projections: OpRecord) -> Code:
        out = Code()
        for target, rhs in zip((g1, g2, g3), grads(g, v1, v2, v3), strict=True):
            if rhs is not None:
                out += accum(target, "=+", rhs, projections=projections)
        return out

    return op_asn, grad_asn


_ASNS = {op: _einsum3_asns(op) for op in _TERNARY}


def einsum3(spec: str, op: str, a: Any, b: Any, c: Any) -> Tensor:
    """A ternary primitive over three operands lined up by an einsum spec, summed over the
    labels the result leaves out (as `oc.einsum` sums products). `op`: "where" (b where a
    is nonzero, else c; no gradient through a) or "fma" (a * b + c).

    Example: ``oc.einsum3("ij;j;i=>ij", "where", mask, rows, cols)``;
    ``oc.einsum3("ij;jk;k=>ik", "fma", a, b, c)`` is ``sum_j (a[i,j]*b[j,k] + c[k])``.
    """
    if not isinstance(op, str) or op not in _TERNARY:
        validate.fail(ArgumentError, f"einsum3: op must be one of {', '.join(sorted(_TERNARY))},"
                                     f" got {validate.describe(op)}")
    parsed = parse_checked("einsum3", spec, (a, b, c))
    op_asn, grad_asn = _ASNS[op]
    return apply(f"einsum3 {op}", Einsum(parsed), op_asn, grad_asn, a, b, c)
