"""Parameters initialized from every kind of init (number, NumPy array, oc.ndarray, a tensor
expression of other tensors and params, another param) x every use (eval, inside an
expression, gradient, an SGD step, compose with input axes). Oracle: NumPy.

Regression: a param initialized from an `oc.ndarray` evaluated correctly on its own but
read as zeros inside any expression (its initializer's data was never initialized)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ocannl_ast as oc

V = np.array([1.0, -2.0, 0.5])
M = np.array([[1.0, 2.0, -1.0], [3.0, -4.0, 0.25]])  # outputs 2, inputs 3
X = np.array([0.5, -1.5, 2.0])

#: kind -> builds the param (a vector of 3) and returns its expected initial value in ctx
Kind = Callable[[], tuple[oc.Tensor, Callable[[oc.Context], np.ndarray]]]


def _number() -> tuple[oc.Tensor, Callable[[oc.Context], np.ndarray]]:
    return oc.param("p", output_dims=[3], init=0.75), lambda ctx: np.full(3, 0.75)


def _numpy() -> tuple[oc.Tensor, Callable[[oc.Context], np.ndarray]]:
    return oc.param("p", init=V.copy()), lambda ctx: V


def _ndarray() -> tuple[oc.Tensor, Callable[[oc.Context], np.ndarray]]:
    return oc.param("p", init=oc.ndarray(V.tolist())), lambda ctx: V


def _expression() -> tuple[oc.Tensor, Callable[[oc.Context], np.ndarray]]:
    q = oc.param("q", init=np.array([2.0, 3.0, 4.0]))
    p = oc.param("p", init=q * 2.0 + oc.ndarray(V) - oc.number(1.0))
    return p, lambda ctx: np.array([2.0, 3.0, 4.0]) * 2.0 + V - 1.0


def _from_random_param() -> tuple[oc.Tensor, Callable[[oc.Context], np.ndarray]]:
    q = oc.param("q", output_dims=[3])  # random init
    p = oc.param("p", init=q)
    return p, lambda ctx: ctx.get(q).astype(np.float64)


def _chain() -> tuple[oc.Tensor, Callable[[oc.Context], np.ndarray]]:
    r = oc.param("r", init=oc.ndarray(V))
    q = oc.param("q", init=r * 3.0)
    p = oc.param("p", init=q + r)
    return p, lambda ctx: V * 3.0 + V


KINDS: dict[str, Kind] = {
    "number": _number, "numpy": _numpy, "ndarray": _ndarray, "expression": _expression,
    "from_random_param": _from_random_param, "chain": _chain,
}


def _ctx() -> oc.Context:
    return oc.Context(precision="float64")


@pytest.mark.parametrize("kind", KINDS)
def test_eval_alone(kind: str) -> None:
    p, expected = KINDS[kind]()
    ctx = _ctx()
    got = ctx.eval(p)
    np.testing.assert_allclose(got, expected(ctx), rtol=0, atol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_inside_expression(kind: str) -> None:
    p, expected = KINDS[kind]()
    y = p * 3.0 + oc.ndarray(X)
    ctx = _ctx()
    got = ctx.eval(y)
    np.testing.assert_allclose(got, expected(ctx) * 3.0 + X, rtol=1e-12)
    np.testing.assert_allclose(ctx.get(p), expected(ctx), rtol=0, atol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_inside_expression_default_context(kind: str) -> None:
    p, expected = KINDS[kind]()
    y = oc.exp(p) * 2.0
    got = oc.eval(y)  # the default float32 context
    np.testing.assert_allclose(got, np.exp(expected(oc.default_context())) * 2.0, rtol=1e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_gradient_finite_differences(kind: str) -> None:
    p, expected = KINDS[kind]()
    W = np.array([0.3, -1.1, 2.0])
    loss = oc.einsum("i;i=>", p * p + oc.sin(p), oc.ndarray(W))
    ctx = _ctx()
    value, (g,) = oc.value_and_grad(loss, [p], ctx=ctx)
    p0 = expected(ctx)

    def f(x: np.ndarray) -> float:
        return float(((x * x + np.sin(x)) * W).sum())

    assert float(value) == pytest.approx(f(p0), rel=1e-12)
    eps = 1e-6
    fd = np.array([(f(p0 + eps * e) - f(p0 - eps * e)) / (2 * eps) for e in np.eye(3)])
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("kind", KINDS)
def test_sgd_step(kind: str) -> None:
    p, expected = KINDS[kind]()
    target = np.array([1.0, 1.0, -1.0])
    d = p - oc.ndarray(target)
    loss = oc.einsum("i;i=>", d, d)
    ctx = _ctx()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
    step()
    p0 = expected(ctx)
    after = ctx.get(p)
    np.testing.assert_allclose(after, p0 - 0.1 * 2.0 * (p0 - target), rtol=1e-12)
    assert [t.label for t in loss.params()] == ["p"]  # the initializer's params are not trained
    step()
    np.testing.assert_allclose(ctx.get(p), after - 0.1 * 2.0 * (after - target), rtol=1e-12)


def test_training_leaves_initializer_params_alone() -> None:
    q = oc.param("q", init=np.array([2.0, 3.0, 4.0]))
    p = oc.param("p", init=q * 2.0)
    loss = oc.einsum("i;i=>", p, p)
    ctx = _ctx()
    ctx.compile([oc.grad_update(loss),
                 oc.sgd_update(loss, learning_rate=0.1, weight_decay=0.5)])()
    np.testing.assert_allclose(ctx.get(q), [2.0, 3.0, 4.0])  # initialized, never updated
    p0 = np.array([4.0, 6.0, 8.0])
    np.testing.assert_allclose(ctx.get(p), p0 - 0.1 * (2.0 * p0 + 0.5 * p0), rtol=1e-12)


COMPOSE_INITS: dict[str, Callable[[], oc.Tensor]] = {
    "ndarray_input_axes": lambda: oc.param("w", init=oc.ndarray(M, input_axes=1)),
    "ndarray_tuple_literal": lambda: oc.param(
        "w", init=oc.ndarray([tuple(row) for row in M.tolist()])),
    "numpy_explicit_dims": lambda: oc.param("w", output_dims=[2], input_dims=[3],
                                            init=M.copy()),
    "tuple_literal": lambda: oc.param("w", init=[tuple(row) for row in M.tolist()]),
    "expression": lambda: oc.param("w", init=oc.ndarray(M / 2.0, input_axes=1) * 2.0),
}


@pytest.mark.parametrize("kind", COMPOSE_INITS)
def test_compose_with_input_axes(kind: str) -> None:
    w = COMPOSE_INITS[kind]()
    y = w @ oc.ndarray(X)
    ctx = _ctx()
    np.testing.assert_allclose(ctx.eval(y), M @ X, rtol=1e-12)
    assert w.shape.output == (2,) and w.shape.input == (3,)
    loss = oc.einsum("i;i=>", y, oc.ndarray([1.0, -2.0]))
    _, (g,) = oc.value_and_grad(loss, [w], ctx=ctx)
    np.testing.assert_allclose(g, np.outer([1.0, -2.0], X), rtol=1e-12)
