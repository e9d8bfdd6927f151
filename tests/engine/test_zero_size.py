"""Axes of size 0 iterate zero times (they are never a fixed index 0): reductions over them
give the accumulator's neutral element (sum 0, max -inf, min +inf), pointwise results are
empty, matmuls with an empty inner dim are zeros, gradients flow (as zeros or empties),
batch axes of size 0 work. Every routine passes the loop-IR bounds verifier."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def ev(t: oc.Tensor) -> np.ndarray:
    return oc.eval(t, precision="float64")


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (0,), (0, 0), (2, 0, 4)])
def test_pointwise_on_empty(shape: tuple[int, ...]) -> None:
    x = np.zeros(shape)
    for t, want in ((oc.ndarray(x) + 1.0, x + 1.0), (oc.exp(oc.ndarray(x)), np.exp(x)),
                    (oc.ndarray(x) * oc.ndarray(x), x * x)):
        got = ev(t)
        assert got.shape == want.shape, (got.shape, want.shape)


@pytest.mark.parametrize(("spec", "shape", "axis"), [
    ("ij=>j", (0, 3), 0), ("ij=>i", (3, 0), 1), ("ij=>", (0, 3), None), ("i=>", (0,), None),
    ("ijk=>ik", (2, 0, 4), 1), ("ij=>j", (0, 0), 0),
])
def test_sum_over_an_empty_axis_is_zero(spec: str, shape: tuple[int, ...],
                                        axis: int | None) -> None:
    x = np.ones(shape)
    got = ev(oc.einsum(spec, oc.ndarray(x)))
    want = x.sum(axis=axis)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("spec", "shape"), [("ij=>j", (0, 3)), ("i=>", (0,))])
def test_max_and_min_over_an_empty_axis_are_their_neutral(spec: str,
                                                          shape: tuple[int, ...]) -> None:
    """NumPy raises on an empty max; here the neutral element of the accumulator."""
    x = np.ones(shape)
    got = ev(oc.einsum_max(spec, oc.ndarray(x)))
    assert np.all(got == -np.inf) and got.shape == x.max(axis=0, initial=-np.inf).shape


@pytest.mark.parametrize(("m", "k", "n"), [(2, 0, 3), (0, 3, 2), (2, 3, 0), (0, 0, 0)])
def test_matmul_with_empty_dims(m: int, k: int, n: int) -> None:
    a, b = np.ones((m, k)), np.ones((k, n))
    got = ev(oc.einsum("ij;jk=>ik", oc.ndarray(a), oc.ndarray(b)))
    np.testing.assert_array_equal(got, a @ b)
    got2 = ev(oc.ndarray(a, input_axes=1) @ oc.ndarray(b, input_axes=1))
    np.testing.assert_array_equal(got2, a @ b)


def test_batch_axis_of_size_zero() -> None:
    x = np.zeros((0, 3))
    w = np.arange(6.0).reshape(2, 3)
    t = oc.ndarray(w, input_axes=1) @ oc.ndarray(x, batch_axes=1)
    got = ev(t)
    assert got.shape == (0, 2)
    s = ev(oc.einsum("b|i=>i", oc.ndarray(x, batch_axes=1)))
    np.testing.assert_array_equal(s, np.zeros(3))


def test_gradients_through_an_empty_inner_dim() -> None:
    """loss = sum(w @ x) with x of length 0: the loss is 0, dloss/dw is an empty (3, 0)."""
    w = oc.param("w_zero_inner", output_dims=[3], input_dims=[0], init=1.0)
    x = oc.ndarray(np.zeros(0))
    loss = oc.einsum("o=>", w @ x)
    val, (gw,) = oc.value_and_grad(loss, [w])
    assert float(val) == 0.0 and gw.shape == (3, 0)


def test_gradients_with_an_empty_batch() -> None:
    """loss = sum over an empty batch of (w * x): 0, and dloss/dw = sum of x over it = 0."""
    w = oc.param("w_zero_batch", output_dims=[3], init=2.0)
    x = oc.ndarray(np.zeros((0, 3)), batch_axes=1)
    loss = oc.einsum("b|o=>", w * x)
    val, (gw,) = oc.value_and_grad(loss, [w])
    assert float(val) == 0.0
    np.testing.assert_array_equal(gw, np.zeros(3))


def test_empty_param_initializes() -> None:
    w = oc.param("w_empty", output_dims=[0], init=None)
    assert ev(w * 2.0).shape == (0,)
