"""NumPy functions on tensors (issue 23 item 7): arithmetic operators with NumPy operands
build the same operation as Python's; every other NumPy function refuses with a located
ArgumentError naming the ocannl_ast function to use — never a silently wrong value
(`np.sum(t * t)` used to return `t * t`, `np.mean(t)` returned `t / 1`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc

X = np.array([1.0, -2.0, 3.0], np.float32)


@pytest.mark.parametrize(("build", "want"), [
    (lambda t: np.array([2.0, 3.0, 4.0], np.float32) * t, X * [2, 3, 4]),
    (lambda t: np.float32(2.0) * t, X * 2),
    (lambda t: np.float64(0.5) + t, X + 0.5),
    (lambda t: np.array([1.0, 1.0, 1.0], np.float32) - t, 1 - X),
    (lambda t: np.array([2.0, 2.0, 2.0], np.float32) / t, 2 / X),
    (lambda t: np.multiply(np.array([1.0, 2.0, 3.0], np.float32), t), X * [1, 2, 3]),
    (lambda t: -t, -X),
])
def test_numpy_arithmetic_builds_the_operation(build: Callable[[Any], Any],
                                               want: np.ndarray) -> None:
    out = build(oc.ndarray(X))
    assert isinstance(out, oc.Tensor)
    np.testing.assert_allclose(oc.eval(out), want, rtol=1e-6)


@pytest.mark.parametrize(("call", "hint"), [
    (lambda t: np.sum(t * t), 'oc.einsum("...=>", x)'),
    (lambda t: np.mean(t), 'oc.einsum("...=>", x)'),
    (lambda t: np.tanh(t), "oc.tanh"),
    (lambda t: np.exp(t), "oc.exp"),
    (lambda t: np.asarray(t), "oc.eval"),
    (lambda t: np.array(t), "oc.eval"),
    (lambda t: np.add.reduce(t), "numpy.add.reduce"),
    (lambda t: np.concatenate([t, t]), "ocannl_ast operations"),
    (lambda t: np.tanh(t.grad), "oc.tanh"),
])
def test_other_numpy_functions_refuse_with_a_located_error(call: Callable[[Any], Any],
                                                           hint: str) -> None:
    t = oc.param("p", init=X)
    with pytest.raises(oc.ArgumentError) as info:
        call(t)  # the line the error must point at
    msg = str(info.value)
    assert hint in msg
    assert "test_numpy_protocols.py" in msg  # located at the user's line


def test_numpy_inside_op_code_refuses() -> None:
    @oc.op
    def energy(x):
        return np.sum(x * x)

    with pytest.raises(oc.OcannlError) as info:
        energy(oc.ndarray(X))
    assert "numpy.sum" in str(info.value)
