"""Compose logic (`@`) reads a binary product: matching axes multiplied, the rest summed
(seed 000). OCANNL rejects it for `/` and `**` (gh-ocannl-192), and so do we, at the user's
line (issue 21 item 3); `*` under `@` still computes the matrix product."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

A = np.arange(1.0, 7.0).reshape(2, 3)
X = np.array([1.0, -2.0, 0.5])


def _w() -> oc.Tensor:
    """A 3 -> 2 weight: compose contracts its input axis with the vector's output axis."""
    return oc.param("w", output_dims=[2], input_dims=[3], init=A)


@oc.cd
def _compose_mul(out, a, b):
    out[...] = sum(a * b, logic="@")


@oc.cd
def _compose_div(out, a, b):
    out[...] = sum(a / b, logic="@")


@oc.cd
def _compose_pow(out, a, b):
    out[...] = sum(a ** b, logic="@")


def test_compose_product_is_the_matrix_product() -> None:
    ctx = oc.Context()
    out = oc.node("out")
    routine = ctx.compile(_compose_mul(out, _w(), oc.ndarray(X)))
    routine()
    np.testing.assert_allclose(ctx.get(out), A @ X, rtol=1e-6)


@pytest.mark.parametrize(("fn", "symbol"), [(_compose_div, "'/'"), (_compose_pow, "'**'")])
def test_compose_rejects_division_and_power(fn: object, symbol: str) -> None:
    with pytest.raises(oc.DslSyntaxError) as info:
        fn(oc.node("out"), _w(), oc.ndarray(X))  # type: ignore[operator]
    msg = str(info.value)
    assert symbol in msg and "compose" in msg
    assert "test_compose_logic.py" in msg  # the user's file
