"""Tensor operations: each one an op_asn / grad_asn pair over one inferred projections
record (seed 000), side by side, plus the public constructors and Python operators.

Input: tensors, numbers, node references. Output: result Tensors (forward code built,
gradient builder attached).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ArgumentError, OcannlError, user_span
from ..infer.logic import BatchSlice, Compose, Einsum, Logic, Pointwise, Transpose
from ..infer.projections import fresh_symbol
from ..infer.spec_parser import parse_spec
from ..lowering.loop_ir import Symbol
from ..rewrite import make_decorator
from . import validate
from .builders import PrimCall, accum, prim
from .code import CheckItem, Code, NodeRef
from .leaves import ndarray, number
from .tensor import Tensor, alias, current_record, make_op

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")

Asn = Callable[..., Code]


def lift(x: Any) -> Tensor:
    """Numbers become constants, node references views, lists/arrays literals."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, NodeRef):
        return alias(x)
    if isinstance(x, bool | int | float | np.floating | np.integer):
        return number(float(x))
    if isinstance(x, list | tuple | np.ndarray):
        return ndarray(x)
    validate.not_a_tensor(x)


#: pointwise operations that fuse into the enclosing assignment inside @cd code
_FUSABLE = frozenset({"add", "sub", "mul", "div", "pow", "neg", "relu", "exp", "log", "tanh",
                      "sin", "cos", "sqrt", "recip", "lt", "le", "eq", "ne", "where",
                      "relu_gate"})


def _op(name: str, logic: Logic, op_asn: Asn, grad_asn: Asn | None, *xs: Any) -> Any:
    """Build the operation; inside an operation's @cd code (projections in context) a
    pointwise sub-expression over slot nodes is fused into the assignment instead of
    becoming an intermediate tensor (the intermediate is virtualized)."""
    if name in _FUSABLE and _fusable(xs, current_record.get() is not None):
        return prim(name, *xs)
    return make_op(name, logic, [lift(x) for x in xs], op_asn, grad_asn, span=user_span())


def _fusable(xs: tuple[Any, ...], in_operation: bool) -> bool:
    """Primitive trees and static indices always fuse; slot nodes fuse inside an operation."""
    if not all(isinstance(x, NodeRef | PrimCall | StaticIndex | bool | int | float) for x in xs):
        return False
    return any(isinstance(x, PrimCall | StaticIndex) for x in xs) or (
        in_operation and any(isinstance(x, NodeRef) for x in xs))


# ---- binary pointwise ------------------------------------------------------------------
# Each operation: its op_asn and grad_asn, written in the @cd dialect as a user would.

@cd
def _add_op(v, v1, v2, projections):
    v[...] = v1 + v2


@cd
def _add_grad(g, g1, g2, projections):
    g1 += g
    g2 += g


@cd
def _sub_op(v, v1, v2, projections):
    v[...] = v1 - v2


@cd
def _sub_grad(g, g1, g2, projections):
    g1 += g
    g2 -= g


@cd
def _mul_op(v, v1, v2, projections):
    v[...] = sum(v1 * v2)


@cd
def _mul_grad(g, g1, g2, v1, v2, projections):
    g1 += g * v2
    g2 += v1 * g


@cd
def _div_op(v, v1, v2, projections):
    v[...] = v1 / v2


@cd
def _div_grad(g, g1, g2, v1, v2, projections):
    g1 += g / v2
    g2 -= g * v1 / (v2 * v2)


@cd
def _pow_op(v, v1, v2, projections):
    v[...] = v1 ** v2


@cd
def _pow_grad(v, g, g1, g2, v1, v2, projections):
    g1 += g * v2 * v1 ** (v2 - 1.0)
    g2 += g * v * log(v1)


def add(a: Any, b: Any) -> Tensor:
    return _op("add", Pointwise(), _add_op, _add_grad, a, b)


def sub(a: Any, b: Any) -> Tensor:
    return _op("sub", Pointwise(), _sub_op, _sub_grad, a, b)


def mul(a: Any, b: Any) -> Tensor:
    """Pointwise product (OCANNL `*.`)."""
    return _op("mul", Pointwise(), _mul_op, _mul_grad, a, b)


def div(a: Any, b: Any) -> Tensor:
    return _op("div", Pointwise(), _div_op, _div_grad, a, b)


def pow_(a: Any, b: Any) -> Tensor:
    return _op("pow", Pointwise(), _pow_op, _pow_grad, a, b)


def matmul(a: Any, b: Any) -> Tensor:
    """Compose (OCANNL `*`): outputs of b meet inputs of a; the shared axes are summed."""
    return _op("compose", Compose(), _mul_op, _mul_grad, a, b)


# ---- unary pointwise -------------------------------------------------------------------

@cd
def _neg_grad(g, g1, projections):
    g1 -= g


@cd
def _relu_grad(g, g1, v1, projections):
    g1 += relu_gate(v1, g)


@cd
def _exp_grad(v, g, g1, projections):
    g1 += g * v


@cd
def _log_grad(g, g1, v1, projections):
    g1 += g / v1


@cd
def _tanh_grad(v, g, g1, projections):
    g1 += g * (1.0 - v * v)


@cd
def _sin_grad(g, g1, v1, projections):
    g1 += g * cos(v1)


@cd
def _cos_grad(g, g1, v1, projections):
    g1 -= g * sin(v1)


@cd
def _sqrt_grad(v, g, g1, projections):
    g1 += g / (2.0 * v)


@cd
def _recip_grad(v, g, g1, projections):
    g1 -= g * v * v


@cd
def _id_grad(g, g1, projections):
    g1 += g


@cd
def _neg_op(v, v1, projections):
    v[...] = -v1


@cd
def _relu_op(v, v1, projections):
    v[...] = relu(v1)


@cd
def _exp_op(v, v1, projections):
    v[...] = exp(v1)


@cd
def _log_op(v, v1, projections):
    v[...] = log(v1)


@cd
def _tanh_op(v, v1, projections):
    v[...] = tanh(v1)


@cd
def _sin_op(v, v1, projections):
    v[...] = sin(v1)


@cd
def _cos_op(v, v1, projections):
    v[...] = cos(v1)


@cd
def _sqrt_op(v, v1, projections):
    v[...] = sqrt(v1)


@cd
def _recip_op(v, v1, projections):
    v[...] = recip(v1)


def _unary(name: str, op_asn: Asn, grad: Asn | None) -> Callable[[Any], Any]:
    def build(x: Any) -> Any:
        return _op(name, Pointwise(), op_asn, grad, x)

    build.__name__ = name
    build.__doc__ = f"Pointwise {name}. Example: ``oc.{name}(x)``."
    return build


neg = _unary("neg", _neg_op, _neg_grad)
relu = _unary("relu", _relu_op, _relu_grad)
exp = _unary("exp", _exp_op, _exp_grad)
log = _unary("log", _log_op, _log_grad)
tanh = _unary("tanh", _tanh_op, _tanh_grad)
sin = _unary("sin", _sin_op, _sin_grad)
cos = _unary("cos", _cos_op, _cos_grad)
sqrt = _unary("sqrt", _sqrt_op, _sqrt_grad)
recip = _unary("recip", _recip_op, _recip_grad)


def relu_gate(a: Any, g: Any) -> Any:
    """`g` where `a > 0`, else 0 (the relu derivative gate); fused inside @cd code."""
    return _op("relu_gate", Pointwise(), _relu_gate_op, None, a, g)


@cd
def _relu_gate_op(v, v1, v2, projections):
    v[...] = relu_gate(v1, v2)


@cd
def _lt_op(v, v1, v2, projections):
    v[...] = lt(v1, v2)


@cd
def _le_op(v, v1, v2, projections):
    v[...] = le(v1, v2)


@cd
def _eq_op(v, v1, v2, projections):
    v[...] = eq(v1, v2)


@cd
def _ne_op(v, v1, v2, projections):
    v[...] = ne(v1, v2)


def _cmp(name: str, op_asn: Asn) -> Callable[[Any, Any], Any]:
    def build(a: Any, b: Any) -> Any:
        return _op(name, Pointwise(), op_asn, None, a, b)

    build.__name__ = name
    build.__doc__ = f"Pointwise comparison {name}: 1.0 where it holds, else 0.0 (no gradient)."
    return build


lt, le, eq, ne = (_cmp("lt", _lt_op), _cmp("le", _le_op), _cmp("eq", _eq_op),
                  _cmp("ne", _ne_op))


@cd
def _where_op(v, v1, v2, v3, projections):
    v[...] = where(v1, v2, v3)


@cd
def _where_grad(g, v1, g2, g3, projections):
    g2 += where(v1, g, 0.0)
    g3 += where(v1, 0.0, g)


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """`a` where `cond` is nonzero, else `b` (gradients flow to the chosen branch)."""
    return _op("where", Pointwise(), _where_op, _where_grad, cond, a, b)


@cd
def _copy_op(v, v1, projections):
    v[...] = v1


def stop_gradient(x: Any) -> Tensor:
    """The same values, not differentiable: no gradient flows through."""
    return _op("stop_gradient", Pointwise(), _copy_op, None, x)


def transpose(x: Any) -> Tensor:
    """Swap input and output axes (batch axes kept)."""
    return _op("transpose", Transpose(), _copy_op, _id_grad, x)


# ---- einsum family -----------------------------------------------------------------------

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


def _sig(names: list[str]) -> Any:
    import inspect

    P = inspect.Parameter
    return inspect.Signature([P(n, P.KEYWORD_ONLY) for n in names])


_EINSUM_ASNS: dict[int, tuple[Asn, Asn]] = {}


def einsum(spec: str, *tensors: Any) -> Tensor:
    """Generalized einsum with sum accumulation, 1..n operands (OCANNL `++`, `+*`).

    Example: ``einsum("ij;jk=>ik", a, b)`` is a matrix product.
    """
    validate.spec_and_operands("einsum", spec, tensors)
    parsed = parse_spec(spec)
    n = len(tensors)
    if n not in _EINSUM_ASNS:
        _EINSUM_ASNS[n] = _einsum_asns(n)
    op_asn, grad_asn = _EINSUM_ASNS[n]
    return _op("einsum", Einsum(parsed), op_asn, grad_asn, *tensors)


@cd
def _max_op1(v, v1, projections):
    v[...] = max(v1)


@cd
def _max_grad1(v, g, v1, g1, projections):
    {ties_lhs}[...] = sum(eq(v1, v))  # noqa: F821  (declared inline: @cd)
    g1 += where(eq(v1, v), g / ties_lhs, 0.0)  # noqa: F821


@cd
def _max_op2(v, v1, v2, projections):
    v[...] = max(v1 + v2)


@cd
def _max_grad2(v, g, v1, v2, g1, g2, projections):
    {ties_lhs}[...] = sum(eq(v1 + v2, v))  # noqa: F821  (declared inline: @cd)
    g1 += where(eq(v1 + v2, v), g / ties_lhs, 0.0)  # noqa: F821
    g2 += where(eq(v1 + v2, v), g / ties_lhs, 0.0)  # noqa: F821


def einsum_max(spec: str, a: Any, b: Any = None) -> Tensor:
    """Max-reduce (OCANNL `@^^`), or with two operands max of a + b (`@^+`, tropical).

    Gradient: each output cell's incoming gradient goes to the positions of the reduction
    that attain its max, split equally among tied positions (k ties get g / k each; in the
    binary form a tied term a[i] + b[j] passes g / k to both a[i] and b[j]), so the
    gradients always sum to the incoming gradient, as JAX and `torch.amax` do. OCANNL gives
    every tied position the full gradient, which double-counts: max(x, x) would get
    gradient 2. Ties are exact float equality with the computed max.
    """
    validate.spec_and_operands("einsum_max", spec, (a,) if b is None else (a, b))
    parsed = parse_spec(spec)
    if b is None:
        return _op("einsum_max", Einsum(parsed), _max_op1, _max_grad1, a)
    return _op("einsum_max", Einsum(parsed), _max_op2, _max_grad2, a, b)


def concat(spec: str, *tensors: Any) -> Tensor:
    """Concatenation along `^` axes (seed 004)."""
    validate.spec_and_operands("concat", spec, tensors)
    parse_spec(spec)
    raise OcannlError(f'concatenation "{spec}" is not supported yet: its projections '
                      "(coupled product factors) are a separate issue", user_span())


# ---- batch slicing -------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StaticIndex:
    """A routine's static integer argument (a batch number, a step), given at each call."""

    symbol: Symbol

    @property
    def name(self) -> str:
        return self.symbol.name


def static_index(name: str) -> StaticIndex:
    """A named static argument. Example: ``b = oc.static_index("batch"); x.batch_slice(b)``
    then ``routine(batch=3)``."""
    if not isinstance(name, str) or not name.isidentifier():
        validate.fail(ArgumentError, f"static_index: name must be an identifier "
                      f"string, got {validate.describe(name)}")
    return StaticIndex(fresh_symbol(name))


def _slice_op(v: NodeRef, v1: NodeRef, t1: NodeRef, projections: Any) -> Code:
    sym = projections.logic.symbol
    return (Code((CheckItem(sym, t1.tensor, 1),))
            + accum(v, "=:", v1, projections=projections))


def batch_slice(x: Any, index: StaticIndex) -> Tensor:
    """The tensor at a runtime batch index (OCANNL `@|`)."""
    if not isinstance(index, StaticIndex):
        validate.fail(ArgumentError, "batch_slice takes an oc.static_index(...), got "
                      f"{validate.describe(index)}")
    return _op("batch_slice", BatchSlice(index.symbol), _slice_op, _id_grad, x)


def unary_op(op_asn: Asn, grad_asn: Asn | None, *, logic: str = ".",
             name: str | None = None) -> Callable[[Any], Tensor]:
    """A differentiable unary operation from a pair of (@cd) assignment functions."""
    from ..infer.logic import logic_of_string

    validate.op_builder_args("unary_op", op_asn, grad_asn, logic, name)
    lg = logic_of_string(logic)
    nm: str = name or str(getattr(op_asn, "__name__", "unary_op"))
    return validate.with_arity(nm, 1, lambda *xs: _op(nm, lg, op_asn, grad_asn, *xs))


def binary_op(op_asn: Asn, grad_asn: Asn | None, *, logic: str = ".",
              name: str | None = None) -> Callable[[Any, Any], Tensor]:
    """A differentiable binary operation from a pair of (@cd) assignment functions."""
    from ..infer.logic import logic_of_string

    validate.op_builder_args("binary_op", op_asn, grad_asn, logic, name)
    lg = logic_of_string(logic)
    nm: str = name or str(getattr(op_asn, "__name__", "binary_op"))
    return validate.with_arity(nm, 2, lambda *xs: _op(nm, lg, op_asn, grad_asn, *xs))
