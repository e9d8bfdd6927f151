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

from ..errors import OcannlError, user_span
from ..infer.logic import BatchSlice, Compose, Einsum, Logic, Pointwise, Transpose
from ..infer.projections import fresh_symbol
from ..infer.spec_parser import parse_spec
from ..lowering.loop_ir import Symbol
from .builders import accum, prim
from .code import CheckItem, Code, NodeRef
from .leaves import ndarray, number
from .tensor import Tensor, alias, make_op

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
    raise OcannlError(f"cannot use {type(x).__name__} as a tensor")


def _op(name: str, logic: Logic, op_asn: Asn, grad_asn: Asn | None, *xs: Any) -> Tensor:
    return make_op(name, logic, [lift(x) for x in xs], op_asn, grad_asn, span=user_span())


# ---- binary pointwise ------------------------------------------------------------------

def _add_op(v: NodeRef, v1: NodeRef, v2: NodeRef, projections: Any) -> Code:
    return accum(v, "=:", prim("add", v1, v2), projections=projections)


def _add_grad(g: NodeRef, g1: NodeRef, g2: NodeRef, projections: Any) -> Code:
    return (accum(g1, "=+", g, projections=projections)
            + accum(g2, "=+", g, projections=projections))


def _sub_op(v: NodeRef, v1: NodeRef, v2: NodeRef, projections: Any) -> Code:
    return accum(v, "=:", prim("sub", v1, v2), projections=projections)


def _sub_grad(g: NodeRef, g1: NodeRef, g2: NodeRef, projections: Any) -> Code:
    return (accum(g1, "=+", g, projections=projections)
            + accum(g2, "=-", g, projections=projections))


def _mul_op(v: NodeRef, v1: NodeRef, v2: NodeRef, projections: Any) -> Code:
    return accum(v, "=:+", prim("mul", v1, v2), projections=projections)


def _mul_grad(g: NodeRef, g1: NodeRef, g2: NodeRef, v1: NodeRef, v2: NodeRef,
              projections: Any) -> Code:
    return (accum(g1, "=+", prim("mul", g, v2), projections=projections)
            + accum(g2, "=+", prim("mul", v1, g), projections=projections))


def _div_op(v: NodeRef, v1: NodeRef, v2: NodeRef, projections: Any) -> Code:
    return accum(v, "=:", prim("div", v1, v2), projections=projections)


def _div_grad(g: NodeRef, g1: NodeRef, g2: NodeRef, v1: NodeRef, v2: NodeRef,
              projections: Any) -> Code:
    d2 = prim("div", prim("mul", g, v1), prim("mul", v2, v2))
    return (accum(g1, "=+", prim("div", g, v2), projections=projections)
            + accum(g2, "=-", d2, projections=projections))


def _pow_op(v: NodeRef, v1: NodeRef, v2: NodeRef, projections: Any) -> Code:
    return accum(v, "=:", prim("pow", v1, v2), projections=projections)


def _pow_grad(v: NodeRef, g: NodeRef, g1: NodeRef, g2: NodeRef, v1: NodeRef, v2: NodeRef,
              projections: Any) -> Code:
    d1 = prim("mul", prim("mul", g, v2), prim("pow", v1, prim("sub", v2, 1.0)))
    d2 = prim("mul", prim("mul", g, v), prim("log", v1))
    return (accum(g1, "=+", d1, projections=projections)
            + accum(g2, "=+", d2, projections=projections))


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

def _unary(name: str, grad: Callable[[NodeRef, NodeRef, NodeRef], Any] | None,
           ) -> Callable[[Any], Tensor]:
    def op_asn(v: NodeRef, v1: NodeRef, projections: Any) -> Code:
        return accum(v, "=:", prim(name, v1), projections=projections)

    grad_asn: Asn | None = None
    if grad is not None:
        def grad_asn(v: NodeRef, g: NodeRef, g1: NodeRef, v1: NodeRef,
                     projections: Any) -> Code:
            return accum(g1, "=+", grad(v, g, v1), projections=projections)

    def build(x: Any) -> Tensor:
        return _op(name, Pointwise(), op_asn, grad_asn, x)

    build.__name__ = name
    build.__doc__ = f"Pointwise {name}. Example: ``oc.{name}(x)``."
    return build


neg = _unary("neg", lambda v, g, v1: prim("neg", g))
relu = _unary("relu", lambda v, g, v1: prim("relu_gate", v1, g))
exp = _unary("exp", lambda v, g, v1: prim("mul", g, v))
log = _unary("log", lambda v, g, v1: prim("div", g, v1))
tanh = _unary("tanh", lambda v, g, v1: prim("mul", g, prim("sub", 1.0, prim("mul", v, v))))
sin = _unary("sin", lambda v, g, v1: prim("mul", g, prim("cos", v1)))
cos = _unary("cos", lambda v, g, v1: prim("neg", prim("mul", g, prim("sin", v1))))
sqrt = _unary("sqrt", lambda v, g, v1: prim("div", g, prim("mul", 2.0, v)))
recip = _unary("recip", lambda v, g, v1: prim("neg", prim("mul", g, prim("mul", v, v))))
identity = _unary("id", lambda v, g, v1: g)


def _cmp(name: str) -> Callable[[Any, Any], Tensor]:
    def op_asn(v: NodeRef, v1: NodeRef, v2: NodeRef, projections: Any) -> Code:
        return accum(v, "=:", prim(name, v1, v2), projections=projections)

    def build(a: Any, b: Any) -> Tensor:
        return _op(name, Pointwise(), op_asn, None, a, b)

    build.__name__ = name
    build.__doc__ = f"Pointwise comparison {name}: 1.0 where it holds, else 0.0 (no gradient)."
    return build


lt, le, eq, ne = _cmp("lt"), _cmp("le"), _cmp("eq"), _cmp("ne")


def _where_op(v: NodeRef, v1: NodeRef, v2: NodeRef, v3: NodeRef, projections: Any) -> Code:
    return accum(v, "=:", prim("where", v1, v2, v3), projections=projections)


def _where_grad(g: NodeRef, v1: NodeRef, g2: NodeRef, g3: NodeRef, projections: Any) -> Code:
    return (accum(g2, "=+", prim("where", v1, g, 0.0), projections=projections)
            + accum(g3, "=+", prim("where", v1, 0.0, g), projections=projections))


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """`a` where `cond` is nonzero, else `b` (gradients flow to the chosen branch)."""
    return _op("where", Pointwise(), _where_op, _where_grad, cond, a, b)


def _stop_op(v: NodeRef, v1: NodeRef, projections: Any) -> Code:
    return accum(v, "=:", v1, projections=projections)


def stop_gradient(x: Any) -> Tensor:
    """The same values, not differentiable: no gradient flows through."""
    return _op("stop_gradient", Pointwise(), _stop_op, None, x)


def transpose(x: Any) -> Tensor:
    """Swap input and output axes (batch axes kept)."""
    return _op("transpose", Transpose(), _stop_op, _id_grad, x)


def _id_grad(g: NodeRef, g1: NodeRef, projections: Any) -> Code:
    return accum(g1, "=+", g, projections=projections)


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
    parsed = parse_spec(spec)
    n = len(tensors)
    if n not in _EINSUM_ASNS:
        _EINSUM_ASNS[n] = _einsum_asns(n)
    op_asn, grad_asn = _EINSUM_ASNS[n]
    return _op("einsum", Einsum(parsed), op_asn, grad_asn, *tensors)


def _max_op1(v: NodeRef, v1: NodeRef, projections: Any) -> Code:
    return accum(v, "=:@^", v1, projections=projections)


def _max_grad1(v: NodeRef, g: NodeRef, v1: NodeRef, g1: NodeRef, projections: Any) -> Code:
    return accum(g1, "=+", prim("where", prim("eq", v1, v), g, 0.0), projections=projections)


def _max_op2(v: NodeRef, v1: NodeRef, v2: NodeRef, projections: Any) -> Code:
    return accum(v, "=:@^", prim("add", v1, v2), projections=projections)


def _max_grad2(v: NodeRef, g: NodeRef, v1: NodeRef, v2: NodeRef, g1: NodeRef, g2: NodeRef,
               projections: Any) -> Code:
    hit = prim("where", prim("eq", prim("add", v1, v2), v), g, 0.0)
    return (accum(g1, "=+", hit, projections=projections)
            + accum(g2, "=+", hit, projections=projections))


def einsum_max(spec: str, a: Any, b: Any = None) -> Tensor:
    """Max-reduce (OCANNL `@^^`), or with two operands max of a + b (`@^+`, tropical).
    Gradients flow only to the argmax positions."""
    parsed = parse_spec(spec)
    if b is None:
        return _op("einsum_max", Einsum(parsed), _max_op1, _max_grad1, a)
    return _op("einsum_max", Einsum(parsed), _max_op2, _max_grad2, a, b)


def concat(spec: str, *tensors: Any) -> Tensor:
    """Concatenation along `^` axes (seed 004)."""
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
    if not name.isidentifier():
        raise OcannlError(f"static index name must be an identifier, got {name!r}")
    return StaticIndex(fresh_symbol(name))


def _slice_op(v: NodeRef, v1: NodeRef, t1: NodeRef, projections: Any) -> Code:
    sym = projections.logic.symbol
    return (Code((CheckItem(sym, t1.tensor, 1),))
            + accum(v, "=:", v1, projections=projections))


def batch_slice(x: Any, index: StaticIndex) -> Tensor:
    """The tensor at a runtime batch index (OCANNL `@|`)."""
    if not isinstance(index, StaticIndex):
        raise OcannlError("batch_slice takes an oc.static_index(...)")
    return _op("batch_slice", BatchSlice(index.symbol), _slice_op, _id_grad, x)


def unary_op(op_asn: Asn, grad_asn: Asn | None, *, logic: str = ".",
             name: str | None = None) -> Callable[[Any], Tensor]:
    """A differentiable unary operation from a pair of (@cd) assignment functions."""
    from ..infer.logic import logic_of_string

    lg = logic_of_string(logic)
    nm: str = name or str(getattr(op_asn, "__name__", "unary_op"))
    return lambda x: _op(nm, lg, op_asn, grad_asn, x)


def binary_op(op_asn: Asn, grad_asn: Asn | None, *, logic: str = ".",
              name: str | None = None) -> Callable[[Any, Any], Tensor]:
    """A differentiable binary operation from a pair of (@cd) assignment functions."""
    from ..infer.logic import logic_of_string

    lg = logic_of_string(logic)
    nm: str = name or str(getattr(op_asn, "__name__", "binary_op"))
    return lambda a, b: _op(nm, lg, op_asn, grad_asn, a, b)
