"""The shape side's shortcuts give what the general path gives: a parameter updated from
its own gradient (`p -= lr * p.grad`: a row `>=` itself, no constraint), closing over many
rounds (a shape whose variables stayed unbound is not read again), the optimizers' errors
located once at the caller's line, and a deep network's shapes and first steps as NumPy
computes them."""

# Tensor arithmetic operators are installed at import time; mypy cannot see them.
# mypy: disable-error-code="operator"

from __future__ import annotations

import inspect

import numpy as np
import pytest

import ocannl_ast as oc

RNG = np.random.default_rng(7)
X = RNG.standard_normal((6, 3))
Y = RNG.standard_normal(6)
W0 = RNG.standard_normal((1, 3))


@oc.cd
def plain_sgd(params, lr):
    for p in params:
        p -= lr * p.grad


def _np_step(w: np.ndarray, lr: float) -> tuple[np.ndarray, float]:
    diff = X @ w[0] - Y
    grad = (2.0 / len(Y)) * (diff @ X)[None, :]
    return w - lr * grad, float((diff * diff).mean())


def test_update_from_own_gradient_matches_numpy() -> None:
    # the param's input row is inferred (open while the update is built)
    w = oc.param("self_w", output_dims=[1], init=W0.copy())
    x = oc.ndarray(X, batch_axes=1)
    diff = w @ x - oc.ndarray(Y[:, None], batch_axes=1)
    loss = oc.einsum("b|->o=>", diff * diff) * (1.0 / len(Y))
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), plain_sgd([w], 0.1)])
    ref = W0.copy()
    for _ in range(4):
        step()
        ref, ref_loss = _np_step(ref, 0.1)
        np.testing.assert_allclose(ctx.get(w), ref, rtol=1e-10)
        np.testing.assert_allclose(float(ctx.get(loss).reshape(-1)[0]), ref_loss, rtol=1e-10)
    assert w.shape.output == (1,) and w.shape.input == (3,)


def _deep(depth: int, width: int) -> tuple[list[oc.Tensor], oc.Tensor]:
    h = oc.ndarray(np.zeros((4, 5)), batch_axes=1)
    ws: list[oc.Tensor] = []
    for i in range(depth):
        w = oc.param(f"deep_w{i}", output_dims=[width if i < depth - 1 else 2])
        b = oc.param(f"deep_b{i}", output_dims=[width if i < depth - 1 else 2])
        ws.append(w)
        h = oc.relu(w @ h + b)
    return ws, oc.einsum("b|o=>o", h)


def test_deep_network_shapes_close_over_rounds() -> None:
    # closing needs several rounds here (leaf rows, then interior rows, then dims); every
    # inferred input row is the previous layer's output
    ws, loss = _deep(12, 7)
    code = [oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1, momentum=0.9)]
    oc.Context().lower_code(code, name="deep_close")
    assert ws[0].shape.input == (5,)
    assert all(w.shape.input == (7,) and w.shape.batch == () for w in ws[1:])
    assert [w.shape.output for w in ws] == [(7,)] * 11 + [(2,)]
    assert loss.shape.output == (2,)


def test_undetermined_parameter_still_named_after_many_rounds() -> None:
    _, loss = _deep(6, 3)
    stray = oc.param("stray_w")  # no dims and no use that determines them
    with pytest.raises(oc.ShapeError, match="stray_w"):
        oc.Context().lower_code([oc.grad_update(loss + oc.einsum("...|...->...=>", stray))],
                                name="stray")


@pytest.mark.parametrize("update", ["sgd", "adam"])
def test_optimizer_shape_error_is_located_at_the_call(update: str) -> None:
    w = oc.param("loc_w", output_dims=[2], input_dims=[3])
    loss = oc.einsum("b|o=>o", w @ oc.ndarray(np.ones((4, 3)), batch_axes=1))
    lr = oc.ndarray(np.full(5, 0.1))  # cannot broadcast into w's 2 outputs
    line = inspect.currentframe().f_lineno + 3  # type: ignore[union-attr]
    with pytest.raises(oc.ShapeError, match="cannot broadcast dimension 5 to 2") as info:
        if update == "sgd":
            oc.sgd_update(loss, learning_rate=lr, momentum=0.9)
        else:
            oc.adam_update(loss, learning_rate=lr)
    span = info.value.span
    assert span is not None and span.file == __file__
    assert span.line == (line if update == "sgd" else line + 2)  # the call's line
