"""oc.testing: check_grads passes on correct gradients (built-in and custom ops), fails with
an AssertionError naming the input and worst cell on a wrong custom gradient; assert_shape
compares closed shapes in OCANNL notation; bad arguments get located oc errors."""

from __future__ import annotations

import time

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.tensor.builders import accum, prim


def _square_op(v, v1, projections):
    return accum(v, "=:", prim("mul", v1, v1), projections=projections)


def _square_grad(g, g1, v1, projections):
    return accum(g1, "=+", prim("mul", prim("mul", 2.0, v1), g), projections=projections)


def _wrong_grad(g, g1, v1, projections):  # 3 * v1 instead of 2 * v1
    return accum(g1, "=+", prim("mul", prim("mul", 3.0, v1), g), projections=projections)


def _sum(t: oc.Tensor) -> oc.Tensor:
    oc.infer_shapes(t)
    spec = "".join("abcdefgh"[: len(t.dims())])
    return oc.einsum(f"{spec}=>", t)


def test_check_grads_passes_on_builtin_ops() -> None:
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 4)), rng.normal(size=(3, 4))
    oc.testing.check_grads(lambda a, b: _sum(oc.tanh(a) * b + oc.sin(a * b)), [x, y])


def test_check_grads_passes_on_correct_custom_grad() -> None:
    square = oc.unary_op(_square_op, _square_grad)
    oc.testing.check_grads(lambda a: _sum(square(a) * a), [np.array([0.5, -1.5, 2.0])])


def test_check_grads_fails_on_wrong_custom_grad() -> None:
    square = oc.unary_op(_square_op, _wrong_grad)
    a = np.array([[0.5, -1.5], [2.0, 0.25]])
    with pytest.raises(AssertionError) as e:
        oc.testing.check_grads(lambda x: _sum(square(x)), [a])
    msg = str(e.value)
    assert "input 0" in msg and "worst cell (1, 0)" in msg, msg
    # worst cell: analytic 3*2.0 = 6, numeric 2*2.0 = 4
    assert "analytic 6," in msg and "numeric 4 " in msg, msg


def test_check_grads_names_the_failing_input() -> None:
    square = oc.unary_op(_square_op, _wrong_grad)
    x, y = np.array([1.0, 2.0]), np.array([0.5, -0.7, 1.5])
    with pytest.raises(AssertionError, match=r"input 1 \(shape \(3,\)\).*worst cell \(2,\)"):
        oc.testing.check_grads(lambda a, b: _sum(a * 1.5) + _sum(square(b)), [x, y])


def test_check_grads_input_the_loss_ignores_is_checked_as_zero() -> None:
    oc.testing.check_grads(lambda a, b: _sum(a * a), [np.array([1.0, 2.0]), np.ones(2)])


def test_check_grads_scalar_input_and_tolerances() -> None:
    oc.testing.check_grads(lambda a: _sum(oc.exp(a)), [np.array(0.3)])
    square = oc.unary_op(_square_op, _wrong_grad)
    # a huge tolerance accepts the wrong gradient: the tolerance is really applied
    oc.testing.check_grads(lambda x: _sum(square(x)), [np.array([0.1])], atol=1.0)


def test_check_grads_small_layer_is_fast() -> None:
    rng = np.random.default_rng(1)
    w, x, b = rng.normal(size=(4, 3)), rng.normal(size=(3,)), rng.normal(size=(4,))
    start = time.perf_counter()
    oc.testing.check_grads(lambda w, x, b: _sum(oc.tanh(oc.einsum("ij;j=>i", w, x) + b)),
                           [w, x, b])
    assert time.perf_counter() - start < 5.0  # compile twice + 38 cheap reruns


@pytest.mark.parametrize("bad", [[], "x", [np.array([np.nan])], [object()]])
def test_check_grads_rejects_bad_inputs(bad: object) -> None:
    with pytest.raises(oc.ArgumentError, match="check_grads: inputs"):
        oc.testing.check_grads(lambda a: a, bad)  # type: ignore[arg-type]


def test_check_grads_rejects_non_scalar_and_bad_eps() -> None:
    with pytest.raises(oc.ArgumentError, match="scalar"):
        oc.testing.check_grads(lambda a: a * 2.0, [np.ones(3)])
    with pytest.raises(oc.ArgumentError, match="eps"):
        oc.testing.check_grads(lambda a: _sum(a), [np.ones(3)], eps=0.0)


def test_assert_shape_passes_and_fails_with_both_shapes() -> None:
    w = oc.param("shape_w", input_dims=[3], output_dims=[4])
    x = oc.ndarray(np.ones((2, 3)), batch_axes=1)
    y = w @ x
    oc.testing.assert_shape(y, "2|4")
    oc.testing.assert_shape(w, "3 -> 4")
    with pytest.raises(AssertionError, match=r"has shape '3->4', expected '2\|3->4'"):
        oc.testing.assert_shape(w, "2|3->4")


def test_assert_shape_rejects_non_tensor() -> None:
    with pytest.raises(oc.ArgumentError, match="assert_shape"):
        oc.testing.assert_shape(np.ones(3), "3")  # type: ignore[arg-type]


def test_check_grads_rejects_fn_of_the_wrong_arity() -> None:
    with pytest.raises(oc.ArgumentError, match=r"fn\(a, b\) cannot take 1 positional argument"):
        oc.testing.check_grads(lambda a, b: _sum(a * b), [np.ones(2)])
    with pytest.raises(oc.ArgumentError, match="cannot take 2 positional arguments"):
        oc.testing.check_grads(lambda a: _sum(a), [np.ones(2), np.ones(2)])
    oc.testing.check_grads(lambda *xs: _sum(xs[0] * xs[1]), [np.ones(2), np.ones(2)])


@pytest.mark.parametrize("name", ["eps", "rtol", "atol"])
def test_check_grads_rejects_bool_tolerances(name: str) -> None:
    with pytest.raises(oc.ArgumentError, match=f"{name} must be a number, got True"):
        oc.testing.check_grads(lambda a: _sum(a), [np.ones(2)], **{name: True})


def _weighted(y: oc.Tensor, seed: int) -> oc.Tensor:
    """sum(W * y) with fixed random W, so that every output cell matters."""
    oc.infer_shapes(y)
    spec = "".join("abcdefgh"[: len(y.dims())])
    w = np.random.default_rng(seed).normal(size=y.dims())
    return oc.einsum(f"{spec};{spec}=>", y, oc.ndarray(w))


@pytest.mark.parametrize("make, shape", [
    (lambda: oc.nn.conv2d(3, 3), (4, 4, 2)),
    (lambda: oc.nn.conv2d(2, 2, stride=2, padding="valid"), (4, 6, 2)),
    (lambda: oc.nn.linear(5), (3,)),
    (lambda: oc.nn.layer_norm(), (6,)),
    (lambda: oc.nn.max_pool2d(2), (4, 4, 2)),
])
def test_check_grads_of_a_layer_is_fast(make, shape: tuple[int, ...]) -> None:  # type: ignore[no-untyped-def]
    """One context per check: a layer's check is two compilations plus cheap reruns (well
    under a second warm; the bound leaves room for a cold compile cache on a busy machine)."""
    layer = make()
    x = np.random.default_rng(3).normal(size=shape)
    start = time.perf_counter()
    oc.testing.check_grads(lambda t: _weighted(oc.tanh(layer(t)), 4), [x])
    assert time.perf_counter() - start < 3.0


def test_check_grads_catches_a_wrong_layer_gradient() -> None:
    """A layer whose backward pass is wrong (a custom op inside it) fails the check."""
    square = oc.unary_op(_square_op, _wrong_grad)
    layer = oc.nn.linear(3)
    with pytest.raises(AssertionError, match="gradient of input 0"):
        oc.testing.check_grads(lambda t: _weighted(square(layer(t)), 5),
                               [np.array([0.5, -1.0])])
