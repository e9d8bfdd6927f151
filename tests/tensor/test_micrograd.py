"""micrograd's README expression through Python operators on tensors.

Oracle: the numbers printed in micrograd's README (github.com/karpathy/micrograd):
g = 24.7041, dg/da = 138.8338, dg/db = 645.5773 — external to this project — and an
independent float64 evaluation of the same expression in plain Python.
"""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def micrograd_expr(a, b, relu):
    c = a + b
    d = a * b + b ** 3
    c += c + 1
    c += 1 + c + (-a)
    d += d * 2 + relu(b + a)
    d += 3 * d + relu(b - a)
    e = c - d
    f = e ** 2
    g = f / 2.0
    g += 10.0 / f
    return g


def py_relu(x: float) -> float:
    return x if x > 0 else 0.0


def test_plain_python_reference_matches_readme() -> None:
    # the expression transcription itself (checked with plain floats)
    g = micrograd_expr(-4.0, 2.0, py_relu)
    assert g == pytest.approx(24.7041, abs=5e-5)
    h = 1e-6
    dga = (micrograd_expr(-4.0 + h, 2.0, py_relu) - micrograd_expr(-4.0 - h, 2.0, py_relu)) / (2 * h)
    dgb = (micrograd_expr(-4.0, 2.0 + h, py_relu) - micrograd_expr(-4.0, 2.0 - h, py_relu)) / (2 * h)
    assert dga == pytest.approx(138.8338, abs=5e-4)
    assert dgb == pytest.approx(645.5773, abs=5e-4)


@pytest.mark.parametrize("precision,tol", [("float32", 2e-3), ("float64", 5e-5)])
def test_micrograd_readme_value_and_grads(precision: str, tol: float) -> None:
    a = oc.param("a", init=-4.0, output_dims=[1])
    b = oc.param("b", init=2.0, output_dims=[1])
    g = micrograd_expr(a, b, oc.relu)
    value, (ga, gb) = oc.value_and_grad(g, [a, b], precision=precision)
    value, ga, gb = (float(np.asarray(x).reshape(-1)[0]) for x in (value, ga, gb))
    assert value == pytest.approx(24.7041, abs=tol * 25)
    assert ga == pytest.approx(138.8338, rel=tol)
    assert gb == pytest.approx(645.5773, rel=tol)
    if precision == "float64":
        ref = micrograd_expr(-4.0, 2.0, py_relu)
        assert value == pytest.approx(ref, rel=1e-12)


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_micrograd_with_scalar_params_from_arrays(precision: str) -> None:
    # params initialized from 1-element arrays, evaluated through a Context
    a = oc.param("a", init=np.array([-4.0]))
    b = oc.param("b", init=np.array([2.0]))
    g = micrograd_expr(a, b, oc.relu)
    ctx = oc.Context(precision=precision)
    ctx.compile(oc.grad_update(g))()
    tol = 2e-3 if precision == "float32" else 5e-6
    assert float(ctx.get(g).reshape(-1)[0]) == pytest.approx(24.7041, rel=tol)
    assert float(ctx.get(a.grad).reshape(-1)[0]) == pytest.approx(138.8338, rel=tol)
    assert float(ctx.get(b.grad).reshape(-1)[0]) == pytest.approx(645.5773, rel=tol)
    assert ctx.get(a).dtype == (np.float32 if precision == "float32" else np.float64)
