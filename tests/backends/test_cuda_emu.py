"""`backend="cuda"` end to end on the CPU emulator of the driver (cuda_emu.py; no GPU needed):
from the user's side, values against the C backend and NumPy, params bit for bit, static
slicing, conv, concat, zero-size axes, grid-stride loops of many rounds, in-kernel checks,
device residency, and the errors a user gets."""

from __future__ import annotations

import sys
from pathlib import Path

import cuda_cases as cc
import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import cuda_backend, get_backend
from ocannl_ast.backends.cuda_backend import render_cuda
from ocannl_ast.lowering.loop_ir import (
    Buffer,
    CheckIndex,
    Const,
    ForLoop,
    Get,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    Symbol,
    index_of,
)

pytestmark = pytest.mark.usefixtures("cuda_emu_driver")


def _run_both(build, *, precision: str = "float32", **statics: int) -> list[np.ndarray]:
    """Values of the tensors `build()` returns (its first one's forward code run once), in a C
    context and in a CUDA one, asserted equal to 1e-6 relative; the CUDA values."""
    outs = build()
    got = {}
    for backend in ("c", "cuda"):
        ctx = oc.Context(backend=backend, precision=precision)
        ctx.compile(outs[0].forward)(**statics)
        got[backend] = [ctx.get(t) for t in outs]
    for c, g in zip(got["c"], got["cuda"]):
        assert c.shape == g.shape
        np.testing.assert_allclose(g, c, rtol=1e-6, atol=1e-12)
    return got["cuda"]


# ---- values -------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_matmul_broadcast_reduction_match_numpy(precision: str) -> None:
    rng = np.random.default_rng(3)
    a, b, m = rng.standard_normal((5, 7)), rng.standard_normal((7, 3)), rng.standard_normal((4, 6))
    tol = 1e-5 if precision == "float32" else 1e-12

    def build():
        mm = oc.einsum("ij;jk=>ik", oc.ndarray(a, label="a"), oc.ndarray(b, label="b"))
        return [mm]

    (mm,) = _run_both(build, precision=precision)
    np.testing.assert_allclose(mm, a @ b, rtol=tol, atol=tol)
    (bc,) = _run_both(lambda: [oc.number(2.5, label="s") * oc.ndarray(m, label="m")],
                      precision=precision)
    np.testing.assert_allclose(bc, 2.5 * m, rtol=tol)
    (red,) = _run_both(lambda: [oc.einsum("pq=>p", oc.ndarray(m, label="m"))],
                       precision=precision)
    np.testing.assert_allclose(red, m.sum(axis=1), rtol=tol, atol=tol)


def test_conv_and_its_gradient_match_c() -> None:
    y, ref = cc.conv()
    ctx = oc.Context(backend="cuda")
    ctx.compile(y.forward)()
    np.testing.assert_allclose(ctx.get(y), ref, rtol=1e-4, atol=1e-5)
    x = oc.param("x", output_dims=[3, 4], init=0.5)
    w = oc.param("w", input_dims=[2, 2], output_dims=[2])
    conv = oc.einsum("oh<+kh, ow<+kw; kh, kw -> c => c, oh, ow", x, w)
    loss = oc.einsum("c, oh, ow => ", oc.tanh(conv))
    grads = {}
    for backend in ("c", "cuda"):
        c = oc.Context(backend=backend)
        c.compile(oc.grad_update(loss))()
        grads[backend] = [c.get(x.grad), c.get(w.grad), c.get(loss)]
    for a, b in zip(grads["c"], grads["cuda"]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_concat_and_its_gradient_match_numpy() -> None:
    a = np.arange(6.0).reshape(2, 3)
    b = -np.arange(4.0).reshape(2, 2)
    (cat,) = _run_both(lambda: [oc.concat("i, a; i, b => i, a^b", oc.ndarray(a, label="a"),
                                          oc.ndarray(b, label="b"))])
    np.testing.assert_array_equal(cat, np.concatenate([a, b], axis=1))
    p = oc.param("p", output_dims=[3], init=1.0)
    q = oc.param("q", output_dims=[2], init=2.0)
    joined = oc.concat("a; b => a^b", p, q)
    loss = oc.einsum("x => ", joined * oc.ndarray(np.arange(1.0, 6.0), label="wts"))
    ctx = oc.Context(backend="cuda")
    ctx.compile(oc.grad_update(loss))()
    np.testing.assert_array_equal(ctx.get(p.grad), [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(ctx.get(q.grad), [4.0, 5.0])
    assert float(ctx.get(loss).reshape(-1)[0]) == 1 + 2 + 3 + 2 * (4 + 5)


def test_zero_size_axes() -> None:
    empty = np.zeros((0, 3))
    (twice,) = _run_both(lambda: [oc.ndarray(empty, label="e") * 2.0])
    assert twice.shape == (0, 3)
    (summed,) = _run_both(lambda: [oc.einsum("pq=>q", oc.ndarray(empty, label="e"))])
    np.testing.assert_array_equal(summed, np.zeros(3))
    (mm,) = _run_both(lambda: [oc.einsum("ij;jk=>ik", oc.ndarray(np.ones((2, 0)), label="a"),
                                         oc.ndarray(np.ones((0, 3)), label="b"))])
    np.testing.assert_array_equal(mm, np.zeros((2, 3)))


def test_grid_stride_loops_of_many_rounds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fewer threads than cells: each thread takes cells t, t + stride, ... (the GPU case of
    a tensor larger than the grid), for fills, nests and reductions."""
    monkeypatch.setattr(cuda_backend, "THREADS_PER_BLOCK", 4)
    monkeypatch.setattr(cuda_backend, "MAX_BLOCKS", 3)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((13, 11)), rng.standard_normal((11, 7))
    p = oc.param("p", output_dims=[13, 7])
    (mm, pv) = _run_both(lambda: [oc.einsum("ij;jk=>ik", oc.ndarray(a, label="a"),
                                            oc.ndarray(b, label="b")) + 0.0 * p, p])
    np.testing.assert_allclose(mm, a @ b, rtol=1e-5, atol=1e-5)
    assert np.all((pv > -1.5) & (pv < 1.5)) and np.unique(pv).size == pv.size


# ---- params, data residency, static indices -------------------------------------------------


def test_param_inits_are_bit_identical_to_c() -> None:
    ps = [oc.param("w", output_dims=[7], input_dims=[3]), oc.param("b", output_dims=[1]),
          oc.param("big", output_dims=[300, 3]), oc.param("c", output_dims=[4], init=0.25)]
    got = {}
    for backend in ("c", "cuda"):
        ctx = oc.Context(backend=backend)
        ctx.ensure_initialized(ps)
        got[backend] = [ctx.get(p) for p in ps]
    for a, b in zip(got["c"], got["cuda"]):
        assert a.tobytes() == b.tobytes()
    assert np.all(got["cuda"][3] == 0.25) and np.unique(got["cuda"][2]).size == 900


def test_set_get_round_trips(cuda_emu_driver) -> None:
    x = oc.term("x", output_dims=[2, 3])
    y = oc.relu(x) * 3.0
    ctx = oc.Context(backend="cuda")
    r = ctx.compile(y.forward)
    v1 = np.arange(-3.0, 3.0).reshape(2, 3)
    ctx.set(x, v1)
    np.testing.assert_array_equal(ctx.get(x), v1)  # before any run: the host value
    r()
    np.testing.assert_array_equal(ctx.get(y), 3.0 * np.maximum(v1, 0))
    np.testing.assert_array_equal(ctx.get(x), v1)
    uploaded = cuda_emu_driver.stats.htod_bytes
    r()  # x unchanged: nothing to upload again
    assert cuda_emu_driver.stats.htod_bytes == uploaded
    ctx.set(x, -v1)
    np.testing.assert_array_equal(ctx.get(y), 3.0 * np.maximum(v1, 0))  # not rerun yet
    r()
    np.testing.assert_array_equal(ctx.get(y), 3.0 * np.maximum(-v1, 0))
    ctx.set(y, np.ones((2, 3)))  # the host overwrites a routine's output, then reads it
    np.testing.assert_array_equal(ctx.get(y), np.ones((2, 3)))


def test_uploads_wait_for_queued_kernels_under_per_thread_default_streams(
        cuda_emu_driver) -> None:
    """A `ctx.set` between two queued runs must not overwrite the input under the first
    run's kernels, also when synchronous copies do not wait for other streams."""
    cuda_emu_driver.per_thread_default_stream = True
    x = oc.term("x", output_dims=[4])
    acc = oc.param("acc_ptds", output_dims=[4], init=0.0)
    ctx = oc.Context(backend="cuda")
    step = ctx.compile(acc_add(acc, x))
    ctx.set(x, np.full(4, 1.0))
    step()  # queued: reads x = 1
    ctx.set(x, np.full(4, 10.0))
    step()  # reads x = 10
    np.testing.assert_array_equal(ctx.get(acc), np.full(4, 11.0))


@oc.cd
def acc_add(acc, x):
    acc += x


def test_launches_are_asynchronous_until_a_read(cuda_emu_driver) -> None:
    x = oc.ndarray(np.arange(4.0), label="x")
    y = x + 1.0
    ctx = oc.Context(backend="cuda")
    r = ctx.compile(y.forward)
    r()
    assert any(cuda_emu_driver.streams.values())  # queued, not run
    np.testing.assert_array_equal(ctx.get(y), np.arange(4.0) + 1.0)
    assert not any(cuda_emu_driver.streams.values())


def test_batch_slice_at_every_static_index() -> None:
    data = np.arange(5 * 3 * 2, dtype=np.float64).reshape(5, 3, 2)
    all_x = oc.ndarray(data, batch_axes=2, label="all_x")
    b = oc.static_index("b")
    y = all_x.batch_slice(b) * 2.0
    ctx = oc.Context(backend="cuda")
    r = ctx.compile(y.forward)
    for i in (3, 0, 4, 1):
        r(b=i)
        np.testing.assert_array_equal(ctx.get(y), 2.0 * data[i])
    for bad in (5, -1, 1 << 40):
        with pytest.raises(oc.RuntimeDataError, match="must lie in"):
            r(b=bad)
    r(b=2)  # a refused call leaves the routine usable
    np.testing.assert_array_equal(ctx.get(y), 2.0 * data[2])


def test_unset_input_is_refused() -> None:
    x = oc.term("x", output_dims=[3])
    ctx = oc.Context(backend="cuda")
    r = ctx.compile((x * 2.0).forward)
    with pytest.raises(oc.RuntimeDataError, match="'x'"):
        r()


# ---- checks inside kernels ------------------------------------------------------------------


def _checked_copy(bound: int) -> LoopProgram:
    i = Symbol(0, "i")
    x, y = Buffer(1, "x", (4,)), Buffer(2, "y", (4,))
    body = ForLoop(i, 4, Seq((CheckIndex(index_of(i, 1, 0), bound, 7),
                              SetCell(y, (index_of(i),), Get(x, (index_of(i),))))))
    return LoopProgram("checked", (x, y), (), body, Precision.FLOAT32)


def test_in_kernel_check_fails_as_runtime_data_error() -> None:
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, dtype=np.float32)
    cuda = get_backend("cuda")
    with pytest.raises(oc.RuntimeDataError, match="code 7"):
        cuda.compile(_checked_copy(3))([x, y])
    ok = cuda.compile(_checked_copy(4))
    ok([x, y])
    cuda.to_host(y)
    np.testing.assert_array_equal(y, x)


def test_const_fill_of_many_cells() -> None:
    out = Buffer(0, "out", (1000,))
    i = Symbol(0, "i")
    prog = LoopProgram("fill", (out,), (), ForLoop(i, 1000, SetCell(out, (index_of(i),),
                                                                      Const(1.5))),
                       Precision.FLOAT64)
    y = np.zeros(1000)
    get_backend("cuda").compile(prog)([y])
    get_backend("cuda").to_host(y)
    np.testing.assert_array_equal(y, np.full(1000, 1.5))


def test_bench_cuda_quick_runs_its_cuda_path() -> None:
    """benchmarks/bench_cuda.py --quick measures the CUDA rows (on the emulator here: the
    times mean nothing, the code path and its value checks are what is exercised: the
    transformer step's first loss agrees with and without graphs)."""
    bench_dir = Path(__file__).resolve().parents[2] / "benchmarks"
    sys.path.insert(0, str(bench_dir))
    try:
        import bench_cuda

        rows = bench_cuda.run(quick=True)
    finally:
        sys.path.remove(str(bench_dir))
    text = [f"{r}" for r in rows]
    assert not any("skipped" in t for t in text), text
    assert sum("cuda time per call" in t for t in text) == 2, text
    # moons and the transformer step, each with graph replay and with direct launches
    assert sum("cuda direct time per call" in t for t in text) == 2, text
    assert sum("graph replay over direct launches" in t for t in text) == 2, text


def test_routines_run_from_other_threads() -> None:
    """A CUDA context is current per host thread: a routine called from a fresh thread (a
    data loader, a server) must make it current there, as `device()` does."""
    import threading

    x = oc.term("x", output_dims=[3])
    y = x * x
    ctx = oc.Context(backend="cuda")
    r = ctx.compile(y.forward)
    ctx.set(x, [1.0, 2.0, 3.0])
    errors: list[BaseException] = []

    def work() -> None:
        try:
            r()
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert errors == []
    np.testing.assert_array_equal(ctx.get(y), [1.0, 4.0, 9.0])


def test_module_images_reach_the_driver_whole() -> None:
    """A CUBIN (ELF) ends with zero bytes of its tables: the runtime hands it over as is
    (it used to strip trailing NULs and append one, so the driver read past the buffer);
    PTX text gets its NUL terminator."""
    from ocannl_ast.backends.cuda_nvrtc import nvrtc_compile
    from ocannl_ast.backends.cuda_runtime import load_image

    assert load_image(b"//ptx") == b"//ptx\0" and load_image(b"//ptx\0") == b"//ptx\0"
    elf = b"\x7fELF" + b"\1" * 8 + b"\0" * 8
    assert load_image(elf) == elf
    try:
        cubin, _ = nvrtc_compile("k", render_cuda(_checked_copy(4)), "sm_90")
    except oc.BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")
    assert cubin.startswith(b"\x7fELF") and load_image(cubin) == cubin


def test_arrays_a_routine_writes_must_be_writeable() -> None:
    x = np.arange(4, dtype=np.float32)
    y = np.zeros(4, dtype=np.float32)
    y.flags.writeable = False  # the routine's result would be downloaded into it
    routine = get_backend("cuda").compile(_checked_copy(4))
    with pytest.raises(oc.BackendError, match="writeable"):
        routine([x, y])
    x.flags.writeable = False  # only read: fine
    y2 = np.zeros(4, dtype=np.float32)
    routine([x, y2])
    get_backend("cuda").to_host(y2)
    np.testing.assert_array_equal(y2, x)
