"""Pointwise ops under an einsum spec (issue 21 item 10): `oc.add(a, b, spec="i;j=>ij")`
is an outer sum, `oc.relu(x, spec="ij=>ji")` a transposing relu; the op is applied under
the spec's projections. Values from NumPy, gradients by float64 central differences,
bad specs located errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc

RNG = np.random.default_rng(10)


def _r(*shape: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape)


def _ev(t: oc.Tensor) -> np.ndarray:
    return oc.eval(t, precision="float64")


BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
}


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_outer_under_a_spec(name: str) -> None:
    a, b = _r(3), _r(4, low=0.5, high=2.0)
    y = getattr(oc, name)(oc.ndarray(a), oc.ndarray(b), spec="i;j=>ij")
    oc.testing.assert_shape(y, "3,4")
    np.testing.assert_allclose(_ev(y), BINARY[name](a[:, None], b[None, :]), rtol=1e-12)


def test_binary_with_permutation_and_broadcast() -> None:
    a, b = _r(2, 3), _r(2)
    y = oc.add(oc.ndarray(a), oc.ndarray(b), spec="ij;i=>ji")
    np.testing.assert_allclose(_ev(y), (a + b[:, None]).T, rtol=1e-12)


UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "relu": lambda x: np.maximum(x, 0.0), "exp": np.exp, "tanh": np.tanh, "neg": np.negative,
    "sin": np.sin,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_transposed(name: str) -> None:
    x = _r(2, 3)
    y = getattr(oc, name)(oc.ndarray(x), spec="ij=>ji")
    oc.testing.assert_shape(y, "3,2")
    np.testing.assert_allclose(_ev(y), UNARY[name](x).T, rtol=1e-12)


def test_unary_spec_with_row_variables_and_kinds() -> None:
    x = _r(2, 3, 4)
    y = oc.relu(oc.ndarray(x, batch_axes=1), spec="...|ij=>...|j->i")
    oc.testing.assert_shape(y, "2|4->3")
    np.testing.assert_allclose(_ev(y), np.maximum(x, 0.0), rtol=1e-12)
    z = oc.exp(oc.ndarray(x), spec="i..r..=>..r..i")
    np.testing.assert_allclose(_ev(z), np.moveaxis(np.exp(x), 0, -1), rtol=1e-12)


def test_spec_none_is_the_plain_op() -> None:
    x = _r(3)
    np.testing.assert_allclose(_ev(oc.relu(oc.ndarray(x), spec=None)), np.maximum(x, 0.0))
    np.testing.assert_allclose(_ev(oc.add(oc.ndarray(x), 1.0)), x + 1.0)


def test_outer_sum_gradients() -> None:
    def fn(a: oc.Tensor, b: oc.Tensor) -> oc.Tensor:
        y = oc.add(a, b, spec="i;j=>ij")
        return oc.einsum("ij=>", y * y)

    oc.testing.check_grads(fn, [_r(3), _r(4)], rtol=1e-6, atol=1e-8)


def test_transposing_relu_and_div_gradients() -> None:
    w = oc.ndarray(_r(3, 2))

    def fn(x: oc.Tensor, d: oc.Tensor) -> oc.Tensor:
        y = oc.relu(x, spec="ij=>ji") * w
        q = oc.div(y, d, spec="ij;i=>ij")
        return oc.einsum("ij=>", q * q)

    x = _r(2, 3)
    x[np.abs(x) < 0.1] = 0.5  # away from relu's kink
    oc.testing.check_grads(fn, [x, _r(3, low=0.5, high=2.0)], rtol=1e-6, atol=1e-8)


def test_reducing_spec_is_a_located_spec_error() -> None:
    x = oc.ndarray(_r(2, 3))
    with pytest.raises(oc.SpecError, match="never reduces") as e:
        oc.relu(x, spec="ij=>i")
    assert Path(__file__).name in str(e.value) and "'j'" in str(e.value)
    with pytest.raises(oc.SpecError, match="never reduces"):
        oc.add(x, x, spec="ij;ik=>ij")


def test_malformed_and_mismatched_specs() -> None:
    x = oc.ndarray(_r(2, 3))
    with pytest.raises(oc.SpecError) as e:
        oc.relu(x, spec="ij=>j(i")
    assert Path(__file__).name in str(e.value)
    with pytest.raises(oc.ShapeError, match="has 2 operand"):
        oc.relu(x, spec="i;j=>ij")
    with pytest.raises(oc.ShapeError) as e2:
        oc.relu(x, spec="ijk=>kji")
    assert Path(__file__).name in str(e2.value)
    with pytest.raises(oc.ShapeError):
        oc.eval(oc.add(x, oc.ndarray(_r(4)), spec="ij;j=>ij"))


def test_fixed_indices_read_and_place_a_slice() -> None:
    x = _r(2, 3)
    np.testing.assert_allclose(_ev(oc.relu(oc.ndarray(x), spec="i1=>i")), np.maximum(x[:, 1], 0))
    y = _ev(oc.neg(oc.ndarray(x[0]), spec="i=>i1"))  # column 1 written, column 0 left 0
    np.testing.assert_allclose(y, np.stack([np.zeros(3), -x[0]], axis=1))


def test_capture_of_a_spec_pointwise_label() -> None:
    y = oc.add(oc.ndarray(_r(3)), oc.ndarray(_r(4)), spec="i;j=>ij")
    j = oc.capture(y, "j")
    oc.infer_shapes(y)
    assert j.value == 4
