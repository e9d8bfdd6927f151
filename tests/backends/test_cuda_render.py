"""CUDA backend without a GPU: rendered source (golden), kernel splitting, NVRTC compiles
every op, the moons training step and a conv to PTX with no error or warning, the disk
cache, and the errors `backend="cuda"` gives when cuda-python or a GPU is missing."""

from __future__ import annotations

import sys

import cuda_cases as cc
import numpy as np
import pytest
from golden_util import assert_golden

import ocannl_ast as oc
from ocannl_ast.backends import CudaBackend, cuda_nvrtc
from ocannl_ast.backends.cuda_backend import plan_cuda, render_cuda
from ocannl_ast.lowering.loop_ir import (
    ROUTINE_PRECISIONS,
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
    Const,
    Fill,
    ForLoop,
    Get,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    Symbol,
    ThreefryUniform,
    index_of,
)
from ocannl_ast.tensor import pipeline
from ocannl_ast.tensor.context import Context, as_code
from ocannl_ast.tensor.initialization import init_order, init_plan


def _nvrtc_or_skip() -> None:
    try:
        cuda_nvrtc.nvrtc_version()
    except oc.BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")


def _ptx_clean(name: str, source: str) -> bytes:
    ptx, log = cuda_nvrtc.nvrtc_compile(name, source, "compute_90")
    assert log == "", f"NVRTC warnings for {name}:\n{log}"
    assert b".entry" in ptx and b".target sm_90" in ptx
    return ptx


# ---- rendering --------------------------------------------------------------------------


def _matmul() -> oc.Tensor:
    a = oc.ndarray(np.ones((2, 3)), label="a")
    b = oc.ndarray(np.ones((3, 4)), label="b")
    return oc.einsum("ij;jk=>ik", a, b)


def _broadcast() -> oc.Tensor:
    return oc.number(2.0, label="s") * oc.ndarray(np.ones((2, 3)), label="m")


def _reduction() -> oc.Tensor:
    return oc.einsum("pq=>p", oc.ndarray(np.ones((2, 3)), label="m"))


CASES = {"matmul": _matmul, "broadcast": _broadcast, "reduction": _reduction}


def test_render_needs_no_gpu_and_differs_from_c() -> None:
    a = oc.ndarray(np.ones((2, 3)), label="a")
    b = oc.ndarray(np.ones((3, 4)), label="b")
    y = oc.einsum("ij;jk=>ik", a, b)
    text = oc.render(y.forward, backend="cuda")
    assert 'extern "C" __global__ void' in text and "__restrict__" in text
    assert "#include" not in text  # NVRTC has no libc headers
    assert oc.render(y.forward) != text


@pytest.mark.parametrize("name", ["matmul", "broadcast", "reduction"])
def test_cuda_golden(name: str) -> None:
    t = CASES[name]()
    assert_golden(f"cuda_{name}.cu", oc.render(t.forward, backend="cuda"))


def test_moons_step_golden_and_one_kernel_per_nest() -> None:
    case = cc.moons_step()
    opts = pipeline.Options("moons_step", fusion_limit=CudaBackend().fusion_limit)
    plan = plan_cuda(pipeline.run(as_code(case["code"]), opts).prog)  # lowered for CUDA
    assert_golden("cuda_moons_step.cu", plan.source)
    # the batch slices' bound, checked before launching: both slices (views of x and y)
    # index `batch` on an axis of 4, so one check covers them
    assert len(plan.host_checks) == 1
    assert all(k.threads >= 1 for k in plan.kernels)
    parallel = [k for k in plan.kernels if k.threads > 1]
    assert len(parallel) > len(plan.kernels) // 2  # most nests run one thread per cell


def _prog(body, bufs, statics=()) -> LoopProgram:
    return LoopProgram("p", tuple(bufs), tuple(statics), body, Precision.FLOAT32)


I, J, K = Symbol(0, "i"), Symbol(1, "j"), Symbol(2, "k")
A, B, C = Buffer(1, "a", (4, 5)), Buffer(2, "b", (5, 3)), Buffer(3, "c", (4, 3))


def _matmul_in_place(order: tuple[Symbol, ...]) -> LoopProgram:
    ext = {I: 4, J: 3, K: 5}
    cell = (index_of(I), index_of(J))
    body = SetCell(C, cell, Binary(BinOp.ADD, Get(C, cell), Binary(
        BinOp.MUL, Get(A, (index_of(I), index_of(K))), Get(B, (index_of(K), index_of(J))))))
    for s in reversed(order):
        body = ForLoop(s, ext[s], body)
    return _prog(Seq((Fill(C, 0.0), body)), [C, A, B])


@pytest.mark.parametrize("order,threads", [
    ((I, J, K), 12), ((J, I, K), 12), ((I, K, J), 4), ((K, I, J), 1), ((K, J, I), 1)])
def test_reduction_loops_stay_in_one_thread(order: tuple[Symbol, ...], threads: int) -> None:
    """Only the outer loops each iteration of which writes its own cells run in parallel:
    an outer reduction loop (k) keeps the whole nest in one thread."""
    plan = plan_cuda(_matmul_in_place(order))
    assert [k.threads for k in plan.kernels] == [12, threads]


def test_reads_of_a_written_buffer_elsewhere_are_serial() -> None:
    """``x[i] = x[i+1]`` (a shift in place) must not run its iterations at once."""
    x = Buffer(1, "x", (5,))
    shift = SetCell(x, (index_of(I),), Get(x, (index_of(I, 1, 1),)))
    plan = plan_cuda(_prog(ForLoop(I, 4, shift), [x]))
    assert [k.threads for k in plan.kernels] == [1]
    same = SetCell(x, (index_of(I),), Binary(BinOp.MUL, Get(x, (index_of(I),)), Const(2.0)))
    assert [k.threads for k in plan_cuda(_prog(ForLoop(I, 5, same), [x])).kernels] == [5]


def test_check_of_a_loop_index_is_on_the_device() -> None:
    s = Symbol(3, "s")
    x = Buffer(1, "x", (4,))
    body = ForLoop(I, 4, Seq((CheckIndex(index_of(I, 1, 0), 4, 7),
                              SetCell(x, (index_of(I),), Const(1.0)))))
    plan = plan_cuda(_prog(Seq((CheckIndex(index_of(s), 2, 3), body)), [x], [s]))
    assert [c.code for c in plan.host_checks] == [3]
    assert "atomicCAS(ocannl_err, 0, 7)" in plan.source and 7 in plan.checks


def test_cpp_keywords_as_buffer_names_are_renamed() -> None:
    x = Buffer(1, "new", (3,))
    y = Buffer(2, "this", (3,))
    prog = _prog(ForLoop(I, 3, SetCell(y, (index_of(I),), Get(x, (index_of(I),)))), [x, y])
    src = render_cuda(prog)
    assert "b_new" in src and "b_this" in src
    _nvrtc_or_skip()
    _ptx_clean("kw", src)


# ---- NVRTC ------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ROUTINE_PRECISIONS)
@pytest.mark.parametrize("op", cc.OPS, ids=lambda o: o.name)
def test_every_op_compiles_to_ptx(op, precision: Precision) -> None:
    _nvrtc_or_skip()
    _ptx_clean(f"op_{op.name.lower()}", render_cuda(cc.op_program(op, 11, precision)))


@pytest.mark.parametrize("precision", ROUTINE_PRECISIONS)
def test_threefry_fill_compiles(precision: Precision) -> None:
    _nvrtc_or_skip()
    x = Buffer(1, "x", (6,))
    body = ForLoop(I, 6, SetCell(x, (index_of(I),), ThreefryUniform((1, 2, 3, 4), index_of(I))))
    src = render_cuda(LoopProgram("init", (x,), (), body, precision))
    assert "ocannl_uniform" in src
    _ptx_clean("init", src)


def test_moons_step_and_conv_compile_to_ptx() -> None:
    _nvrtc_or_skip()
    case = cc.moons_step()
    _ptx_clean("moons_step", oc.render(case["code"], backend="cuda"))
    y, _ = cc.conv()
    _ptx_clean("conv", oc.render(y.forward, backend="cuda"))
    ctx = Context()  # the params' init routine (threefry on the device) too
    _, _, held = ctx.lower_code(case["code"])
    init = init_plan(init_order(held, ctx.initialized), ctx.precision).code
    prog, _, _ = ctx.lower_code(init, name="init")
    assert "ocannl_vec_uniform_f" in render_cuda(prog)  # seed 001's expression
    _ptx_clean("init", render_cuda(prog))


def test_ptx_cache_reuses_verified_entries(tmp_path, monkeypatch) -> None:
    _nvrtc_or_skip()
    src = render_cuda(cc.op_program(BinOp.ADD, 4, Precision.FLOAT32))
    first = cuda_nvrtc.compile_ptx("add", src, "compute_90", tmp_path)
    calls = []
    real = cuda_nvrtc.nvrtc_compile
    monkeypatch.setattr(cuda_nvrtc, "nvrtc_compile",
                        lambda *a: calls.append(a) or real(*a))
    assert cuda_nvrtc.compile_ptx("add", src, "compute_90", tmp_path) == first
    assert calls == []
    (ptx,) = tmp_path.glob("*.ptx")
    ptx.write_bytes(b"garbage")  # fails its digest: rebuilt
    assert cuda_nvrtc.compile_ptx("add", src, "compute_90", tmp_path) == first
    assert len(calls) == 1 and ptx.read_bytes() == first


def test_nvrtc_error_is_a_backend_error() -> None:
    _nvrtc_or_skip()
    with pytest.raises(oc.BackendError, match="NVRTC could not compile"):
        cuda_nvrtc.nvrtc_compile("bad", "extern \"C\" __global__ void k() { nope; }",
                                 "compute_90")


# ---- availability -----------------------------------------------------------------------


def _has_gpu() -> bool:
    from ocannl_ast.backends.cuda_runtime import device

    try:
        device()
    except oc.BackendError:
        return False
    return True


def test_context_without_gpu_says_what_is_missing() -> None:
    if _has_gpu():
        pytest.skip("a GPU is present: Context(backend='cuda') works here")
    with pytest.raises(oc.BackendError, match="GPU|cuda-python|NVRTC") as info:
        oc.Context(backend="cuda")
    assert "test_cuda_render.py" in str(info.value)  # located at the user's line


def test_without_cuda_python_render_works_and_context_names_it(monkeypatch) -> None:
    for mod in [m for m in sys.modules if m == "cuda" or m.startswith("cuda.")]:
        monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "cuda", None)  # import cuda -> ImportError
    cuda_nvrtc.nvrtc_version.cache_clear()
    try:
        with pytest.raises(oc.BackendError, match="needs cuda-python.*pip install"):
            oc.Context(backend="cuda")
        y = oc.number(2.0) * oc.ndarray(np.ones(3))
        assert "__global__" in oc.render(y.forward, backend="cuda")
    finally:
        cuda_nvrtc.nvrtc_version.cache_clear()
