"""Long row reductions summed in 8 lanes (issue 19: `backends.c_lanes`), from the user's
side: the result is the documented lane order bit for bit (checked against a NumPy
emulation of it), the same bits on every path (reordering, scheduling passes and threads
on or off), NumPy's values within rounding, NaN / infinities / signed zeros handled, the
gradients of softmax and layer norm right, and ``OCANNL_AST_LANES=0`` back to the in-order
fold."""

# Tensor arithmetic operators are installed at import time; mypy cannot see them.
# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

LANED = "in 8 lanes"
Outputs = tuple[list[np.ndarray], str]  # values and the rendered C of the routine


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "cache"))


def _rows(n: int, seed: int, dt: type = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(6, n)).astype(dt)


def row_sum(n: int = 45, dt: type = np.float32) -> Outputs:
    """Sums of rows of `n` (5 whole blocks of 8 and a tail of 5 at 45)."""
    y = oc.einsum("b|i=>b|0", oc.ndarray(_rows(n, 1, dt), batch_axes=1))
    ctx = oc.Context(precision="float32" if dt == np.float32 else "float64")
    return [ctx.eval(y)], oc.render(y.forward)


def softmax_step() -> Outputs:
    """Softmax rows of 40 and their gradient (max, sum and the backprop's row sums)."""
    rng = np.random.default_rng(2)
    logits = oc.param("ln_sm", output_dims=[40], init=rng.normal(size=40).astype(np.float32))
    p = oc.nn.softmax(oc.ndarray(_rows(40, 3), batch_axes=1) + logits)
    loss = oc.einsum("b|o; o=>", p * p, oc.ndarray(rng.normal(size=40).astype(np.float32)))
    ctx = oc.Context()
    src = oc.render(oc.grad_update(loss))
    ctx.compile(oc.grad_update(loss))()
    return [ctx.get(p), ctx.get(loss), ctx.get(logits.grad)], src


def layer_norm_step() -> Outputs:
    """A layer norm over rows of 64 and its gradients (mean, variance, backprop sums)."""
    rng = np.random.default_rng(4)
    x = oc.param("ln_x", output_dims=[64], init=rng.normal(size=64).astype(np.float32))
    y = oc.nn.layer_norm()(oc.ndarray(_rows(64, 5), batch_axes=1) * x)
    loss = oc.einsum("b|o; o=>", y * y, oc.ndarray(rng.normal(size=64).astype(np.float32)))
    ctx = oc.Context()
    src = oc.render(oc.grad_update(loss))
    ctx.compile(oc.grad_update(loss))()
    return [ctx.get(y), ctx.get(loss), ctx.get(x.grad)], src


def _special_rows() -> np.ndarray:
    a = _rows(33, 6)
    a[0, 17] = np.nan  # NaN propagates
    a[1, :] = -np.inf
    a[2, 30] = np.inf
    a[3, :] = 0.0
    a[3, 9] = -0.0
    return a


def row_max() -> Outputs:
    y = oc.einsum_max("b|i=>b|0", oc.ndarray(_special_rows(), batch_axes=1))
    return [oc.Context().eval(y)], oc.render(y.forward)


PROGRAMS: dict[str, Callable[[], Outputs]] = {
    "row_sum": row_sum, "row_sum_f64": lambda: row_sum(37, np.float64),
    "softmax": softmax_step, "layer_norm": layer_norm_step, "row_max": row_max,
}

PATHS = {  # environment settings of the paths that must give the same bits
    "reorder off": {"OCANNL_AST_REORDER": "0"},
    "schedule off": {"OCANNL_AST_SCHEDULE": "0"},
    "both off": {"OCANNL_AST_SCHEDULE": "0", "OCANNL_AST_REORDER": "0"},
    "2 threads": {"OCANNL_AST_THREADS": "2"},
    "-O3 unrolled": {"OCANNL_AST_CFLAGS": "-O3 -march=native -funroll-loops"},
}


def _bits(values: list[np.ndarray]) -> list[bytes]:
    return [np.ascontiguousarray(v).tobytes() for v in values]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_same_bits_on_every_path(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    base, src = PROGRAMS[name]()
    assert LANED in src
    for path, env in PATHS.items():
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            assert _bits(PROGRAMS[name]()[0]) == _bits(base), path


def _lane_sum(row: np.ndarray) -> np.floating:
    """The documented order: lane l sums k = l, l + 8, ... from -0.0; a tree of the lanes."""
    t = row.dtype.type
    lanes = [t(-0.0)] * 8
    for k, v in enumerate(row):
        lanes[k % 8] = t(lanes[k % 8] + v)
    while len(lanes) > 1:
        lanes = [t(lanes[i] + lanes[i + 1]) for i in range(0, len(lanes), 2)]
    return t(t(0.0) + lanes[0])


@pytest.mark.parametrize(("n", "dt"), [(45, np.float32), (17, np.float32), (37, np.float64),
                                       (64, np.float32)])
def test_sum_is_the_documented_lane_order(n: int, dt: type) -> None:
    (got,), src = row_sum(n, dt)
    assert LANED in src
    want = np.array([[_lane_sum(r)] for r in _rows(n, 1, dt)])
    np.testing.assert_array_equal(got, want)
    exact = _rows(n, 1, dt).astype(np.float64).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(got, exact, rtol=0, atol=n * np.finfo(dt).eps * 4 * n)


def test_max_handles_nan_infinities_and_zeros() -> None:
    (got,), _ = row_max()
    want = np.max(_special_rows(), axis=1, keepdims=True)
    np.testing.assert_array_equal(got, want)  # NaN row NaN, -inf row -inf, zeros row 0


def test_lanes_off_is_the_in_order_fold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_LANES", "0")
    (got,), src = row_sum(45)
    assert LANED not in src
    want = np.array([[np.cumsum(r, dtype=np.float32)[-1]] for r in _rows(45, 1)])
    np.testing.assert_array_equal(got, want)


def test_short_and_strided_reductions_keep_their_order() -> None:
    """16 terms or fewer (unrolled by the scheduling passes) and a sum over a strided axis
    (the reordering's to vectorize) are not laned."""
    short = oc.einsum("b|i=>b|0", oc.ndarray(_rows(16, 7), batch_axes=1))
    strided = oc.einsum("i,j=>j", oc.ndarray(_rows(40, 8).T.copy()))
    for t in (short, strided):
        assert LANED not in oc.render(t.forward)


def test_softmax_and_layer_norm_match_numpy() -> None:
    (p, _, _), _ = softmax_step()
    rng = np.random.default_rng(2)
    z = _rows(40, 3).astype(np.float64) + rng.normal(size=40).astype(np.float32)
    e = np.exp(z - z.max(axis=1, keepdims=True))
    np.testing.assert_allclose(p, e / e.sum(axis=1, keepdims=True), rtol=2e-6, atol=1e-7)
    (y, _, _), _ = layer_norm_step()
    rng = np.random.default_rng(4)
    v = _rows(64, 5).astype(np.float64) * rng.normal(size=64).astype(np.float32)
    mu, var = v.mean(axis=1, keepdims=True), v.var(axis=1, keepdims=True)
    np.testing.assert_allclose(y, (v - mu) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-5)


def test_gradients_through_laned_rows() -> None:
    rng = np.random.default_rng(9)
    w = oc.ndarray(rng.normal(size=24))
    oc.testing.check_grads(lambda x: oc.einsum("o; o=>", oc.nn.softmax(x), w),
                           [rng.normal(size=24)])
    oc.testing.check_grads(lambda x: oc.einsum("o; o=>", oc.nn.layer_norm()(x), w),
                           [rng.normal(size=24)])


@pytest.mark.parametrize("program", [softmax_step, layer_norm_step])
def test_gradient_subtractions_are_laned(program: Callable[[], Outputs],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The backprop's ``=-`` row sums (softmax's and layer norm's) run in lanes too: each lane
    subtracts its terms from -0.0 and the lanes are added to the accumulator; the values are
    the in-order fold's (``OCANNL_AST_LANES=0``) within rounding."""
    laned, src = program()
    subtracting = [ln for ln in src.splitlines()
                   if "ocannl_lane" in ln and "] - " in ln and "] = ocannl_lane" in ln]
    assert subtracting, "no laned subtraction in the rendered gradient"
    monkeypatch.setenv("OCANNL_AST_LANES", "0")
    in_order, src0 = program()
    assert LANED not in src0
    for a, b in zip(laned, in_order, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
