"""More pointwise operations, each with its gradient: sign, floor, round (optionally
straight-through), abs, sigmoid, clamp, mod, exp2, log2, recip_sqrt, fma. Written like
`pointwise` (op_asn and grad_asn in the @cd dialect); inside an operation's @cd code each
fuses into the assignment (the composites as their primitive tree). Input: tensors,
numbers, node references. Output: Tensors or primitives.
"""

# Written in the @cd dialect: primitive names resolve when the rewritten bodies run.
# ruff: noqa: F821

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from ...errors import ArgumentError
from ...infer.logic import Pointwise
from ...rewrite import make_decorator
from .. import validate
from ..node import Tensor
from .base import Asn, apply, fuses
from .custom import operation
from .pointwise import add, exp, lt, mul, neg, recip, where
from .with_spec import apply_spec

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")
_LN2 = math.log(2.0)


def _prim_op(name: str, arity: int, op_asn: Asn, grad_asn: Asn | None,
             doc: str) -> Callable[..., Any]:
    """The public builder of a primitive with `arity` operands, with its real signature
    (a wrong operand count is Python's TypeError at the call) and `spec=` as the other
    pointwise ops have it."""
    def call(xs: tuple[Any, ...], spec: str | None) -> Any:
        if spec is not None:  # under an einsum spec's projections (`ops.with_spec`)
            return apply_spec(name, spec, op_asn, grad_asn, *xs)
        return apply(name, Pointwise(), op_asn, grad_asn, *xs, fuse=True)

    build: Callable[..., Any]
    if arity == 1:
        def build(x: Any, *, spec: str | None = None) -> Any:
            return call((x,), spec)
    elif arity == 2:
        def build(a: Any, b: Any, *, spec: str | None = None) -> Any:
            return call((a, b), spec)
    else:
        def build(a: Any, b: Any, c: Any, *, spec: str | None = None) -> Any:
            return call((a, b, c), spec)

    build.__name__ = build.__qualname__ = name
    build.__doc__ = doc
    return build


@cd
def _no_grad(g, g1, projections):
    """A gradient that is zero almost everywhere (sign, floor, round)."""


@cd
def _pass_grad(g, g1, projections):
    g1 += g


@cd
def _sign_op(v, v1, projections):
    v[...] = sign(v1)


sign = _prim_op("sign", 1, _sign_op, _no_grad,
                "Pointwise sign: -1, 0 or 1 (NaN stays NaN); zero gradient, as np.sign.")


@cd
def _floor_op(v, v1, projections):
    v[...] = floor(v1)


floor = _prim_op("floor", 1, _floor_op, _no_grad,
                 "Pointwise floor (np.floor); zero gradient.")


@cd
def _round_op(v, v1, projections):
    v[...] = round(v1)


_round = _prim_op("round", 1, _round_op, _no_grad, "")
_round_st = _prim_op("round", 1, _round_op, _pass_grad, "")


def round_(x: Any, straight_through: bool = False) -> Any:
    """Pointwise rounding to the nearest integer, halves to even (np.round). Its gradient is
    zero, or with `straight_through=True` the identity's (the straight-through estimator
    of quantization-aware training)."""
    if not isinstance(straight_through, bool):
        validate.fail(ArgumentError, "round: straight_through must be a bool, got "
                                     f"{validate.describe(straight_through)}")
    return (_round_st if straight_through else _round)(x)


@cd
def _abs_op(v, v1, projections):
    v[...] = v1 * sign(v1)


@cd
def _abs_grad(g, g1, v1, projections):
    g1 += g * sign(v1)


_abs = _prim_op("abs", 1, _abs_op, _abs_grad, "")


def abs_(x: Any) -> Any:
    """Pointwise absolute value (np.abs); gradient sign(x) (0 at 0)."""
    return mul(x, sign(x)) if fuses(x) else _abs(x)


@cd
def _sigmoid_op(v, v1, projections):
    v[...] = recip(1.0 + exp(-v1))


@cd
def _sigmoid_grad(v, g, g1, projections):
    g1 += g * v * (1.0 - v)


def sigmoid(x: Any) -> Any:
    """Pointwise logistic sigmoid `1 / (1 + exp(-x))`; gradient `s * (1 - s)`."""
    if fuses(x):
        return recip(add(1.0, exp(neg(x))))
    return apply("sigmoid", Pointwise(), _sigmoid_op, _sigmoid_grad, x)


@cd
def _clamp_op(v, v1, projections, lo, hi):
    v[...] = where(lt(v1, lo), lo, where(lt(hi, v1), hi, v1))


@cd
def _clamp_grad(g, g1, v1, projections, lo, hi):
    g1 += where(lt(v1, lo), 0.0, where(lt(hi, v1), 0.0, g))


_clamp = operation("unary", 1, "clamp", Pointwise(), _clamp_op, _clamp_grad)


def clamp(x: Any, lo: float, hi: float) -> Any:
    """Pointwise `x` limited to [lo, hi] (np.clip; NaN stays NaN); the gradient passes where
    lo <= x <= hi, as torch.clamp's."""
    validate.check_arg_number("clamp", "lo", lo)
    validate.check_arg_number("clamp", "hi", hi)
    if not lo <= hi:
        validate.fail(ArgumentError, f"clamp: lo ({lo}) must not exceed hi ({hi})")
    lo, hi = float(lo), float(hi)
    if fuses(x):
        return where(lt(x, lo), lo, where(lt(hi, x), hi, x))
    return _clamp(x, lo=lo, hi=hi)


@cd
def _mod_op(v, v1, v2, projections):
    v[...] = mod_(v1, v2)


@cd
def _mod_grad(g, g1, g2, v1, v2, projections):
    g1 += g
    g2 -= g * floor(v1 / v2)


mod = _prim_op("mod", 2, _mod_op, _mod_grad,
               "Pointwise modulo with the divisor's sign (np.mod, Python's %); gradient 1 "
               "for `a`, -floor(a / b) for `b`.")


@cd
def _exp2_op(v, v1, projections):
    v[...] = exp2(v1)


@cd
def _exp2_grad(v, g, g1, projections):
    g1 += g * v * _LN2


exp2 = _prim_op("exp2", 1, _exp2_op, _exp2_grad, "Pointwise 2 ** x.")


@cd
def _log2_op(v, v1, projections):
    v[...] = log2(v1)


@cd
def _log2_grad(g, g1, v1, projections):
    g1 += g / (v1 * _LN2)


log2 = _prim_op("log2", 1, _log2_op, _log2_grad, "Pointwise base-2 logarithm.")


@cd
def _recip_sqrt_op(v, v1, projections):
    v[...] = recip_sqrt(v1)


@cd
def _recip_sqrt_grad(v, g, g1, projections):
    g1 -= 0.5 * g * v * v * v


recip_sqrt = _prim_op("recip_sqrt", 1, _recip_sqrt_op, _recip_sqrt_grad,
                      "Pointwise 1 / sqrt(x).")


@cd
def _fma_op(v, v1, v2, v3, projections):
    v[...] = fma(v1, v2, v3)


@cd
def _fma_grad(g, g1, g2, g3, v1, v2, projections):
    g1 += g * v2
    g2 += v1 * g
    g3 += g


fma_pointwise = _prim_op("fma", 3, _fma_op, _fma_grad,
                         "Pointwise fused multiply-add `a * b + c` (`oc.fma` is the compose form).")


def _is_symbolic(x: Any) -> bool:
    from ..builders import PrimCall
    from ..node import NodeRef, StaticIndex

    return isinstance(x, Tensor | NodeRef | PrimCall | StaticIndex)


def dual(builtin: Callable[..., Any], elementwise: Callable[..., Any]) -> Callable[..., Any]:
    """In a dialect body, `abs`/`round` are the elementwise operations on tensors and the
    builtins on Python values (`round(n / 2)` for a size stays an int)."""
    def fn(*args: Any, **kwargs: Any) -> Any:
        if any(_is_symbolic(a) for a in args):
            return elementwise(*args, **kwargs)
        return builtin(*args, **kwargs)

    fn.__name__ = fn.__qualname__ = builtin.__name__
    fn.__doc__ = elementwise.__doc__
    return fn
