"""CUDA graph replay of a routine's launches and NVRTC programs compiled in parts. The `gpu`
tests run on a GPU where one is usable, else on the driver emulator (cuda_emu.py, with its
stream capture and graphs: cuda_emu_graphs.py); the others on the emulator only.

A replayed graph holds the kernel parameters captured with it: these tests fail if a stale
graph runs on other arrays (a key missing the device addresses), if static arguments were
baked into a graph, or if the fallback to direct launches stopped working."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import cuda_cases as cc
import cuda_emu
import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import cuda_graphs, cuda_nvrtc, get_backend
from ocannl_ast.backends.cuda_backend import plan_cuda
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
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


def _gather(stages: int = 1) -> LoopProgram:
    """``y_k[i] = x[b, i] + k`` for k < `stages` (one kernel each), `b` a static argument."""
    i, b = Symbol(0, "i"), Symbol(1, "b")
    x = Buffer(0, "x", (3, 4))
    ys = [Buffer(k + 1, f"y{k}", (4,)) for k in range(stages)]
    nests = tuple(ForLoop(i, 4, SetCell(y, (index_of(i),), Binary(
        BinOp.ADD, Get(x, (index_of(b), index_of(i))), Const(float(k)))))
        for k, y in enumerate(ys))
    return LoopProgram("gather", (x, *ys), (b,), Seq(nests), Precision.FLOAT32)


def _arrays(stages: int, seed: int) -> list[np.ndarray]:
    x = np.random.default_rng(seed).standard_normal((3, 4)).astype(np.float32)
    return [x, *(np.zeros(4, dtype=np.float32) for _ in range(stages))]


def _outputs(arrays: list[np.ndarray]) -> list[np.ndarray]:
    for a in arrays[1:]:
        get_backend("cuda").to_host(a)
    return arrays[1:]


@pytest.mark.gpu
def test_graph_replay_follows_static_arguments_and_rebound_arrays(cuda_device: str) -> None:
    routine = get_backend("cuda").compile(_gather(2))
    assert routine.graphs.state == "on"
    a, b = _arrays(2, 0), _arrays(2, 1)
    for s in (2, 0, 1):  # one graph for every value of the static argument
        routine(a, [s])
        for k, y in enumerate(_outputs(a)):
            np.testing.assert_array_equal(y, a[0][s] + k)
    assert routine.graphs.captures == 1
    routine(b, [1])  # other arrays: other device addresses, a new graph
    for k, y in enumerate(_outputs(b)):
        np.testing.assert_array_equal(y, b[0][1] + k)
    assert routine.graphs.captures == 2
    a[0][:] = -a[0]
    get_backend("cuda").host_written(a[0])
    routine(a, [0])  # back to the first arrays: their graph again, with their new values
    for k, y in enumerate(_outputs(a)):
        np.testing.assert_array_equal(y, a[0][0] + k)
    assert routine.graphs.captures == 2 and routine.graphs.state == "on"


def test_least_recently_used_graphs_are_destroyed(cuda_emu_driver, monkeypatch) -> None:
    monkeypatch.setattr(cuda_graphs, "CAPACITY", 2)
    routine = get_backend("cuda").compile(_gather(1))
    sets = [_arrays(1, seed) for seed in range(3)]
    destroyed = cuda_emu_driver.stats.calls.get("cuGraphExecDestroy", 0)
    for arrays in [*sets, sets[0]]:
        routine(arrays, [2])
        np.testing.assert_array_equal(_outputs(arrays)[0], arrays[0][2])
    assert routine.graphs.captures == 4  # the first set's graph was evicted by the third
    assert len(routine.graphs.execs) == 2
    assert cuda_emu_driver.stats.calls.get("cuGraphExecDestroy", 0) - destroyed == 2


def _train(steps: int, graphs: str) -> tuple[list[float], list[np.ndarray]]:
    case = cc.moons_step(n=64, batch=16)
    ctx = oc.Context(backend="cuda")
    step = ctx.compile(case["code"])
    losses = []
    for i in range(steps):
        step(batch=i % case["n_batches"], step=i)
        losses.append(float(ctx.get(case["loss"])[0]))
    assert step.compiled.graphs.state.startswith(graphs)
    assert step.compiled.graphs.captures == (1 if graphs == "on" else 0)
    return losses, [ctx.get(p) for p in case["loss"].params()]


@pytest.mark.gpu
def test_graphs_and_direct_launches_train_alike(cuda_device: str, monkeypatch) -> None:
    """The moons step (a static batch index and step count) with graphs (one captured for
    every step), and with the knob off: the same losses and params, bit for bit."""
    losses, params = _train(5, "on")
    monkeypatch.setenv("OCANNL_AST_CUDA_GRAPHS", "0")
    direct_losses, direct_params = _train(5, "off (OCANNL_AST_CUDA_GRAPHS=0)")
    assert losses == direct_losses and len(set(losses)) > 1
    for p, q in zip(params, direct_params, strict=True):
        assert p.tobytes() == q.tobytes()


@pytest.fixture
def no_graph_driver() -> Iterator[cuda_emu.FakeDriver]:
    """A driver without graph support (beginning a capture fails)."""
    d = cuda_emu.FakeDriver(Path(tempfile.mkdtemp(prefix="ocannl_cuda_emu_")), graphs=False)
    with cuda_emu.installed(d):
        yield d


def test_a_failed_capture_falls_back_once_for_good(no_graph_driver) -> None:
    routine = get_backend("cuda").compile(_gather(2))
    arrays = _arrays(2, 3)
    for s in (0, 2, 1):
        routine(arrays, [s])
        for k, y in enumerate(_outputs(arrays)):
            np.testing.assert_array_equal(y, arrays[0][s] + k)
    assert routine.graphs.state.startswith("off (capture unavailable")
    assert no_graph_driver.stats.calls.get("cuStreamBeginCapture") == 1  # never retried
    assert no_graph_driver.stats.launches == 6


@pytest.mark.gpu
def test_in_kernel_checks_run_inside_a_graph(cuda_device: str) -> None:
    """The error word is cleared before each replay and read back after it."""
    i = Symbol(0, "i")
    x, y = Buffer(0, "x", (4,)), Buffer(1, "y", (4,))
    from ocannl_ast.lowering.loop_ir import CheckIndex

    body = ForLoop(i, 4, Seq((CheckIndex(index_of(i, 1, 0), 3, 7),
                              SetCell(y, (index_of(i),), Get(x, (index_of(i),))))))
    routine = get_backend("cuda").compile(
        LoopProgram("checked", (x, y), (), body, Precision.FLOAT32))
    arrays = [np.arange(4, dtype=np.float32), np.zeros(4, dtype=np.float32)]
    for _ in range(2):  # the second failure comes from the replayed graph
        with pytest.raises(oc.RuntimeDataError, match="code 7"):
            routine(arrays)
    assert routine.graphs.captures == 1


# ---- NVRTC programs in parts ----------------------------------------------------------------


def test_part_sources_are_balanced_and_cover_every_kernel() -> None:
    plan = plan_cuda(_gather(7))
    assert plan.part_sources(1) == [(plan.source, range(7))]
    assert (plan.head + "".join(plan.units)).rstrip("\n") + "\n" == plan.source
    parts = plan.part_sources(3)
    assert [k for _, ks in parts for k in ks] == list(range(7))
    assert sorted(len(ks) for _, ks in parts) == [2, 2, 3]
    for src, ks in parts:
        assert src.startswith(plan.head)
        assert [k.name for k in plan.kernels if f" {k.name}(" in src] == \
            [plan.kernels[k].name for k in ks]
    assert len(plan.part_sources(50)) == 7  # at most one kernel a part


@pytest.mark.gpu
def test_a_routine_in_parts_computes_the_same(cuda_device: str, monkeypatch) -> None:
    monkeypatch.setattr(cuda_nvrtc, "MIN_PART_KERNELS", 2)
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", "3")
    assert cuda_nvrtc.part_count(7) == 3 and cuda_nvrtc.part_count(3) == 1
    routine = get_backend("cuda").compile(_gather(7))
    assert len(routine._modules) == 3
    arrays = _arrays(7, 4)
    routine(arrays, [1])
    for k, y in enumerate(_outputs(arrays)):
        np.testing.assert_array_equal(y, arrays[0][1] + k)


def test_bad_job_count_is_refused(monkeypatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", "many")
    with pytest.raises(oc.BackendError, match="OCANNL_AST_CC_JOBS"):
        cuda_nvrtc.nvrtc_jobs()
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", "auto")
    assert 1 <= cuda_nvrtc.nvrtc_jobs() <= cuda_nvrtc.MAX_AUTO_PARTS


def test_a_launch_refused_while_capturing_ends_the_capture(cuda_emu_driver, monkeypatch) -> None:
    """The capture is ended (never left open, which would swallow later launches) and the
    routine launches directly from then on, with the right values."""
    launch = cuda_emu_driver.cuLaunchKernel

    def refuse_in_capture(*args):  # type: ignore[no-untyped-def]
        if cuda_emu_driver.captures:
            return (cuda_emu.CUresult.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,)
        return launch(*args)

    monkeypatch.setattr(cuda_emu_driver, "cuLaunchKernel", refuse_in_capture)
    routine = get_backend("cuda").compile(_gather(2))
    arrays = _arrays(2, 5)
    for s in (1, 2):
        routine(arrays, [s])
        assert not cuda_emu_driver.captures
        for k, y in enumerate(_outputs(arrays)):
            np.testing.assert_array_equal(y, arrays[0][s] + k)
    assert routine.graphs.state.startswith("off (capture failed")
    assert "STREAM_CAPTURE_UNSUPPORTED" in routine.graphs.state


def test_extra_nvrtc_flags_are_keyed_and_numeric_ones_refused(monkeypatch) -> None:
    src = plan_cuda(_gather(1)).source
    plain = cuda_nvrtc.cache_key(src, "sm_90")
    monkeypatch.setenv("OCANNL_AST_NVRTC_FLAGS", "--Ofast-compile=min")
    assert cuda_nvrtc.options()[-1] == "--Ofast-compile=min"
    assert cuda_nvrtc.cache_key(src, "sm_90") != plain
    for bad in ("-use_fast_math", "-fmad=true", "--ftz=true", "-prec-div=false"):
        monkeypatch.setenv("OCANNL_AST_NVRTC_FLAGS", f"-lineinfo {bad}")
        with pytest.raises(oc.BackendError, match="may not set"):
            cuda_nvrtc.options()
