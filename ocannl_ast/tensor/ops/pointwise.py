"""Pointwise ops: each one's op_asn and grad_asn (in the @cd dialect, as a user would write
them) next to its constructor; all fuse into an enclosing @cd assignment as the primitive
of the same name. Input: tensors, numbers, node references. Output: Tensors or primitives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...infer.logic import Pointwise
from ...rewrite import make_decorator
from .. import precisions
from ..node import Tensor
from .base import Asn, apply
from .with_spec import apply_spec

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")


def _binary(name: str, op_asn: Asn, grad_asn: Asn | None, doc: str) -> Callable[[Any, Any], Any]:
    def build(a: Any, b: Any, *, spec: str | None = None) -> Any:
        if spec is not None:  # under an einsum spec's projections (`ops.with_spec`)
            return apply_spec(name, spec, op_asn, grad_asn, a, b)
        return apply(name, Pointwise(), op_asn, grad_asn, a, b, fuse=True)

    build.__name__ = name
    build.__doc__ = doc
    return build


def _unary(name: str, op_asn: Asn, grad_asn: Asn | None) -> Callable[[Any], Any]:
    def build(x: Any, *, spec: str | None = None) -> Any:
        if spec is not None:  # under an einsum spec's projections (`ops.with_spec`)
            return apply_spec(name, spec, op_asn, grad_asn, x)
        return apply(name, Pointwise(), op_asn, grad_asn, x, fuse=True)

    build.__name__ = name
    build.__doc__ = (f"Pointwise {name}. Example: ``oc.{name}(x)``; with ``spec=`` (an einsum "
                     f"spec) under its projections: ``oc.{name}(x, spec=\"ij=>ji\")``.")
    return build


# ---- binary arithmetic ---------------------------------------------------------------------

@cd
def _add_op(v, v1, v2, projections):
    v[...] = v1 + v2


@cd
def _add_grad(g, g1, g2, projections):
    g1 += g
    g2 += g


add = _binary("add", _add_op, _add_grad, "Pointwise sum (OCANNL `+`).")


@cd
def _sub_op(v, v1, v2, projections):
    v[...] = v1 - v2


@cd
def _sub_grad(g, g1, g2, projections):
    g1 += g
    g2 -= g


sub = _binary("sub", _sub_op, _sub_grad, "Pointwise difference (OCANNL `-`).")


@cd
def _mul_op(v, v1, v2, projections):
    v[...] = sum(v1 * v2)


@cd
def _mul_grad(g, g1, g2, v1, v2, projections):
    g1 += g * v2
    g2 += v1 * g


mul = _binary("mul", _mul_op, _mul_grad, "Pointwise product (OCANNL `*.`).")


@cd
def _div_op(v, v1, v2, projections):
    v[...] = v1 / v2


@cd
def _div_grad(g, g1, g2, v1, v2, projections):
    g1 += g / v2
    g2 -= g * v1 / (v2 * v2)


div = _binary("div", _div_op, _div_grad, "Pointwise quotient (OCANNL `/.`).")


@cd
def _pow_op(v, v1, v2, projections):
    v[...] = v1 ** v2


@cd
def _pow_grad(v, g, g1, g2, v1, v2, projections):
    g1 += g * v2 * v1 ** (v2 - 1.0)
    g2 += g * v * log(v1)


pow_ = _binary("pow", _pow_op, _pow_grad, "Pointwise power (OCANNL `**.`).")


# ---- unary ---------------------------------------------------------------------------------

@cd
def _neg_op(v, v1, projections):
    v[...] = -v1


@cd
def _neg_grad(g, g1, projections):
    g1 -= g


neg = _unary("neg", _neg_op, _neg_grad)


@cd
def _relu_op(v, v1, projections):
    v[...] = relu(v1)


@cd
def _relu_grad(g, g1, v1, projections):
    g1 += relu_gate(v1, g)


relu = _unary("relu", _relu_op, _relu_grad)


@cd
def _relu_gate_op(v, v1, v2, projections):
    v[...] = relu_gate(v1, v2)


@cd
def _relu_gate_grad(g, g2, v1, projections):
    g2 += relu_gate(v1, g)


relu_gate = _binary("relu_gate", _relu_gate_op, _relu_gate_grad,
                    "`b` where `a > 0`, else 0 (the relu derivative gate); the gradient flows "
                    "to `b` where the gate is open, none to `a`.")


@cd
def _exp_op(v, v1, projections):
    v[...] = exp(v1)


@cd
def _exp_grad(v, g, g1, projections):
    g1 += g * v


exp = _unary("exp", _exp_op, _exp_grad)


@cd
def _log_op(v, v1, projections):
    v[...] = log(v1)


@cd
def _log_grad(g, g1, v1, projections):
    g1 += g / v1


log = _unary("log", _log_op, _log_grad)


@cd
def _tanh_op(v, v1, projections):
    v[...] = tanh(v1)


@cd
def _tanh_grad(v, g, g1, projections):
    g1 += g * (1.0 - v * v)


tanh = _unary("tanh", _tanh_op, _tanh_grad)


@cd
def _sin_op(v, v1, projections):
    v[...] = sin(v1)


@cd
def _sin_grad(g, g1, v1, projections):
    g1 += g * cos(v1)


sin = _unary("sin", _sin_op, _sin_grad)


@cd
def _cos_op(v, v1, projections):
    v[...] = cos(v1)


@cd
def _cos_grad(g, g1, v1, projections):
    g1 -= g * sin(v1)


cos = _unary("cos", _cos_op, _cos_grad)


@cd
def _sqrt_op(v, v1, projections):
    v[...] = sqrt(v1)


@cd
def _sqrt_grad(v, g, g1, projections):
    g1 += g / (2.0 * v)


sqrt = _unary("sqrt", _sqrt_op, _sqrt_grad)


@cd
def _recip_op(v, v1, projections):
    v[...] = recip(v1)


@cd
def _recip_grad(v, g, g1, projections):
    g1 -= g * v * v


recip = _unary("recip", _recip_op, _recip_grad)


# ---- comparisons and selection (no gradient through the condition) -------------------------

def _cmp(name: str, op_asn: Asn) -> Callable[[Any, Any], Any]:
    return _binary(name, op_asn, None, f"Pointwise comparison {name}: 1.0 where it holds, "
                                       "else 0.0 (no gradient).")


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


lt, le, eq, ne = (_cmp("lt", _lt_op), _cmp("le", _le_op), _cmp("eq", _eq_op),
                  _cmp("ne", _ne_op))


@cd
def _where_op(v, v1, v2, v3, projections):
    v[...] = where(v1, v2, v3)


@cd
def _where_grad(g, v1, g2, g3, projections):
    g2 += where(v1, g, 0.0)
    g3 += where(v1, 0.0, g)


def where(cond: Any, a: Any, b: Any, *, spec: str | None = None) -> Tensor:
    """`a` where `cond` is nonzero, else `b` (gradients flow to the chosen branch). With
    `spec` (a 3-operand einsum spec) the operands are lined up by its projections."""
    if spec is not None:
        return apply_spec("where", spec, _where_op, _where_grad, cond, a, b)
    return apply("where", Pointwise(), _where_op, _where_grad, cond, a, b, fuse=True)


@cd
def _copy_op(v, v1, projections):
    v[...] = v1


def stop_gradient(x: Any) -> Tensor:
    """The same values, not differentiable: no gradient flows through."""
    return apply("stop_gradient", Pointwise(), _copy_op, None, x)


@cd
def _cast_grad(g, g1, projections):
    g1 += g


def cast(x: Any, precision: str) -> Tensor:
    """`x`'s values stored in `precision` ("float16", "bfloat16", "float32", "float64"),
    whatever the context's: a copy rounded to nearest even where it is stored, read back
    exactly by every consumer (`tensor.precisions`); the gradient passes through unchanged
    (its cells are stored in `precision` too). Example: ``h = oc.cast(oc.relu(x @ w),
    "bfloat16")``."""
    p = precisions.parse("cast", precision, integers=False, none=False)
    assert p is not None
    t = apply("cast", Pointwise(), _copy_op, _cast_grad, x)
    t.precision = p
    return t
