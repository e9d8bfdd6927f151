"""Batch-slice views on `backend="cuda"` (a real GPU where one is usable, else the driver
emulator): writes through `x.batch_slice(i)` reach `x` on the device, reads after them see
them, a per-step record in a training loop, the C backend's and NumPy's values; the view's
kernels compile with NVRTC without a warning."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import cuda_nvrtc
from ocannl_ast.backends.cuda_backend import render_cuda

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_device")]


def _rows(backend: str, order: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Rows written through a slice in `order`, then read back through the slice in the
    same routine: the parent and the last read."""
    i = oc.static_index("i")
    hist = oc.node("hist", batch_dims=[5], output_dims=[4, 3])
    y = oc.term("y", output_dims=[4, 3])
    back = hist.batch_slice(i) * 2.0

    @oc.cd
    def record(hist, y):
        hist.batch_slice(i)[...] = y + 1.0

    ctx = oc.Context(backend=backend, precision="float64")
    r = ctx.compile([record(hist, y), back.forward])
    for k in order:
        ctx.set(y, np.arange(12.0).reshape(4, 3) * (k + 0.5))
        r(i=k)
    return ctx.get(hist), ctx.get(back)


def test_rows_written_through_views_match_c_and_numpy() -> None:
    order = [3, 0, 4, 1]
    want = np.zeros((5, 4, 3))
    for k in order:
        want[k] = np.arange(12.0).reshape(4, 3) * (k + 0.5) + 1.0
    c_hist, c_back = _rows("c", order)
    g_hist, g_back = _rows("cuda", order)
    np.testing.assert_array_equal(c_hist, want)
    np.testing.assert_array_equal(g_hist, want)
    np.testing.assert_array_equal(g_back, 2.0 * want[1])
    np.testing.assert_array_equal(g_back, c_back)


def _trace(backend: str) -> np.ndarray:
    w = oc.param("w", init=np.array([1.0, -2.0, 0.25]), output_dims=[3])
    step = oc.static_index("step")
    trace = oc.node("trace", batch_dims=[4], output_dims=[3])
    loss = oc.einsum("i=>", (w - 0.5) ** 2.0)

    @oc.cd
    def record(trace, w):
        trace.batch_slice(step)[...] = w

    ctx = oc.Context(backend=backend, precision="float64")
    r = ctx.compile([oc.grad_update(loss), record(trace, w),
                     oc.sgd_update(loss, learning_rate=0.1)])
    for k in range(4):
        r(step=k)
    return ctx.get(trace)


def test_training_loop_record_matches_c() -> None:
    want, cur = np.zeros((4, 3)), np.array([1.0, -2.0, 0.25])
    for k in range(4):
        want[k] = cur
        cur = cur - 0.2 * (cur - 0.5)
    np.testing.assert_allclose(_trace("c"), want, rtol=1e-12)
    np.testing.assert_allclose(_trace("cuda"), want, rtol=1e-12)


def test_bad_index_writes_nothing_on_the_device() -> None:
    x0 = np.arange(6.0).reshape(3, 2)
    x = oc.param("x", init=x0, batch_dims=[3], output_dims=[2])
    s = x.batch_slice(oc.static_index("i"))

    @oc.cd
    def write(s):
        s[...] = 9.0

    ctx = oc.Context(backend="cuda", precision="float64")
    r = ctx.compile(write(s))
    with pytest.raises(oc.RuntimeDataError, match="must lie in"):
        r(i=3)
    np.testing.assert_array_equal(ctx.get(x), x0)
    r(i=0)
    np.testing.assert_array_equal(ctx.get(x), [[9.0, 9.0], [2.0, 3.0], [4.0, 5.0]])


def test_view_kernels_compile_with_nvrtc() -> None:
    try:
        cuda_nvrtc.nvrtc_version()
    except oc.BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")
    i = oc.static_index("i")
    hist = oc.node("hist", batch_dims=[6], output_dims=[8])

    @oc.cd
    def record(hist, y):
        hist.batch_slice(i)[...] = y * 3.0

    ctx = oc.Context(backend="c")
    prog, _, _ = ctx.lower_code(record(hist, oc.ndarray(np.ones(8))), name="views")
    source = render_cuda(prog)
    assert "8*s_i" in source.replace(" ", "") or "s_i*8" in source.replace(" ", "")
    ptx, log = cuda_nvrtc.nvrtc_compile("views", source, "compute_90")
    assert log == "" and b".entry" in ptx


def _contract(backend: str, a: np.ndarray, b: np.ndarray, x0: np.ndarray) -> np.ndarray:
    i = oc.static_index("i")
    hist = oc.node("hist", batch_dims=[3], output_dims=[32, 40])
    x = oc.param("x", init=x0, batch_dims=[3], output_dims=[48, 40])

    @oc.cd
    def products(hist, a, b, x):
        hist.batch_slice(i)[...] = sum(a * b, logic="ik;kj=>ij")
        hist.batch_slice(i)[...] += sum(a * x.batch_slice(i), logic="ik;kj=>ij")

    ctx = oc.Context(backend=backend, precision="float64")
    r = ctx.compile(products(hist, oc.ndarray(a), oc.ndarray(b), x))
    r(i=2)
    r(i=0)
    return ctx.get(hist)


def test_contractions_into_and_from_views_match_c_and_numpy() -> None:
    # big enough for the C backend's contraction kernels (a pointer into the parent's row)
    rng = np.random.default_rng(5)
    a, b, x0 = rng.normal(size=(32, 48)), rng.normal(size=(48, 40)), rng.normal(size=(3, 48, 40))
    want = np.zeros((3, 32, 40))
    for k in (2, 0):
        want[k] = a @ b + a @ x0[k]
    np.testing.assert_allclose(_contract("c", a, b, x0), want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(_contract("cuda", a, b, x0), want, rtol=1e-10, atol=1e-10)
