"""The op library split by family: built-in pointwise ops fuse into an enclosing @cd
assignment as their primitive; a custom op never does, even when its name is a primitive's
(it used to be silently replaced by that primitive: exp instead of the user's op)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.tensor.node import AccumItem

X = np.array([0.25, 0.5, 1.5])

UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "neg": np.negative, "relu": lambda a: np.maximum(a, 0.0), "exp": np.exp, "log": np.log,
    "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "sqrt": np.sqrt, "recip": np.reciprocal,
}


def _outer(inner: Callable[[Any], Any]) -> Callable[[Any], oc.Tensor]:
    """A custom op whose op_asn is `v = v1 + inner(v1)` (inner: a sub-expression)."""
    @oc.cd
    def op_asn(v, v1, projections):
        v[...] = v1 + inner(v1)

    return oc.unary_op(op_asn, None, name="outer")


@pytest.mark.parametrize("name", sorted(UNARY))
def test_builtin_pointwise_ops_fuse_into_the_assignment(name: str) -> None:
    y = _outer(getattr(oc, name))(oc.ndarray(X, label="x"))
    assert sum(isinstance(it, AccumItem) for it in y.forward) == 1  # no intermediate
    np.testing.assert_allclose(oc.eval(y, precision="float64"), X + UNARY[name](X), rtol=1e-12)


@oc.cd
def _double_op(v, v1, projections):
    v[...] = 2.0 * v1


@oc.cd
def _double_grad(g, g1, projections):
    g1 += 2.0 * g


@pytest.mark.parametrize("name", ["exp", "relu", "neg", "tanh", "id"])
def test_custom_op_named_like_a_primitive_is_not_replaced(name: str) -> None:
    double = oc.unary_op(_double_op, _double_grad, name=name)
    y = _outer(double)(oc.ndarray(X, label="x"))
    np.testing.assert_allclose(oc.eval(y, precision="float64"), 3.0 * X, rtol=1e-12)


@oc.cd
def _wsum_op(v, v1, v2, projections):
    v[...] = v1 + 3.0 * v2


@oc.cd
def _wsum_grad(g, g1, g2, projections):
    g1 += g
    g2 += 3.0 * g


@pytest.mark.parametrize("name", ["mul", "add", "sub", "max"])
def test_custom_binary_op_named_like_a_primitive_is_not_replaced(name: str) -> None:
    wsum = oc.binary_op(_wsum_op, _wsum_grad, name=name)

    @oc.cd
    def op_asn(v, v1, projections):
        v[...] = v1 + wsum(v1, v1)

    y = oc.unary_op(op_asn, None, name="outer")(oc.ndarray(X, label="x"))
    np.testing.assert_allclose(oc.eval(y, precision="float64"), 5.0 * X, rtol=1e-12)


def _fd_grad(f: Callable[[np.ndarray], float], x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(x)
    for i in range(x.size):
        e = np.zeros_like(x)
        e.flat[i] = h
        out.flat[i] = (f(x + e) - f(x - e)) / (2 * h)
    return out


def test_custom_op_named_exp_has_its_own_gradient() -> None:
    double = oc.unary_op(_double_op, _double_grad, name="exp")
    p = oc.param("p", output_dims=[3], init=X)
    loss = oc.einsum("i=>", double(p) * double(p))
    value, (grad,) = oc.value_and_grad(loss, [p], ctx=oc.Context(precision="float64"))
    np.testing.assert_allclose(value, [np.sum((2 * X) ** 2)], rtol=1e-12)
    np.testing.assert_allclose(grad, _fd_grad(lambda a: float(np.sum((2 * a) ** 2)), X),
                               rtol=1e-6)
