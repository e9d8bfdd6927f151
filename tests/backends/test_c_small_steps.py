"""Small training steps (issue 19, moons vs hand-fused C), from the user's side: a short sum
per cell (a 2-input layer's dot products) is rendered for gcc to unroll, with NumPy's
values; and a routine's per-call fast path (one locked C call) stays exact and leaves the
context's lock free after every failure, for other threads."""

# Tensor arithmetic operators are installed at import time; mypy cannot see them.
# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import shutil
import threading

import numpy as np
import pytest

import ocannl_ast as oc

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


def _lock_is_free(ctx: oc.Context) -> bool:
    """Whether another thread can take the context's lock (an RLock: ours would re-enter)."""
    got: list[bool] = []

    def take() -> None:
        ok = ctx.lock.acquire(timeout=5)
        got.append(ok)
        if ok:
            ctx.lock.release()

    t = threading.Thread(target=take)
    t.start()
    t.join()
    return got == [True]


def test_short_sums_are_unrolled_and_match_numpy() -> None:
    rng = np.random.default_rng(3)
    xv = rng.standard_normal((20, 2)).astype(np.float32)
    wv = rng.standard_normal((16, 2)).astype(np.float32)
    w = oc.param("ss_w", output_dims=[16], input_dims=[2], init=wv)
    y = oc.relu(w @ oc.ndarray(xv, batch_axes=1))
    src = oc.render(y.forward)
    lines = src.splitlines()
    at = [i for i, ln in enumerate(lines) if ln.strip() == "#pragma GCC unroll 2"]
    assert at and all("< 2;" in lines[i + 1] for i in at)
    ctx = oc.Context()
    ctx.compile(y.forward)()
    # the same order of operations as the loop: (0 + w0 x0) + w1 x1, in float32
    want = (np.float32(0) + wv[:, 0] * xv[:, :1]) + wv[:, 1] * xv[:, 1:]
    np.testing.assert_array_equal(ctx.get(y), np.maximum(want, 0))


def test_cuda_dialect_has_no_gcc_unroll_pragma() -> None:
    w = oc.param("ss_cw", output_dims=[16], input_dims=[2], init=np.ones((16, 2), np.float32))
    y = w @ oc.ndarray(np.ones((4, 2), np.float32), batch_axes=1)
    assert "#pragma GCC unroll 2" in oc.render(y.forward)
    assert "GCC unroll" not in oc.render(y.forward, backend="cuda")


def _step() -> tuple[oc.Context, oc.Routine, oc.Tensor, np.ndarray]:
    arr = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    idx = oc.static_index("batch")
    y = oc.ndarray(arr, batch_axes=1).batch_slice(idx) + 1.0
    ctx = oc.Context()
    return ctx, ctx.compile(y.forward), y, arr


@pytest.mark.parametrize("bad", [-1, 4, 2**70, 2.0, "1"])
def test_fast_path_failures_leave_the_lock_free(bad: object) -> None:
    ctx, r, y, arr = _step()
    r(batch=1)
    r(batch=2)  # the fast path from here on
    with pytest.raises((oc.RuntimeDataError, oc.ArgumentError, OverflowError)):
        r(batch=bad)  # type: ignore[arg-type]
    assert _lock_is_free(ctx)
    with pytest.raises((oc.RuntimeDataError, oc.ArgumentError, OverflowError)):
        r(bad)  # type: ignore[arg-type]
    assert _lock_is_free(ctx)
    for i in (3, 0, 3):
        r(batch=i)
        np.testing.assert_array_equal(ctx.get(y), arr[i] + 1)
        r(i)
        np.testing.assert_array_equal(ctx.get(y), arr[i] + 1)
    assert _lock_is_free(ctx)


def test_fast_path_error_is_located_at_the_call() -> None:
    _, r, _, _ = _step()
    r(batch=0)
    r(batch=1)
    with pytest.raises(oc.RuntimeDataError, match="failed with code") as info:
        r(batch=9)
    assert "test_c_small_steps.py" in str(info.value)


def test_fast_path_waits_for_a_thread_holding_the_lock() -> None:
    ctx, r, y, arr = _step()
    r(batch=0)
    r(batch=1)
    ran = threading.Event()

    def call() -> None:
        r(batch=2)
        ran.set()

    with ctx.lock:
        t = threading.Thread(target=call)
        t.start()
        assert not ran.wait(0.2)  # blocked on the lock while we hold it
        np.testing.assert_array_equal(ctx.get(y), arr[1] + 1)
    t.join()
    assert ran.is_set()
    np.testing.assert_array_equal(ctx.get(y), arr[2] + 1)
