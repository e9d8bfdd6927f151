"""Contraction kernels on hand-built loop IR: the accumulate-in-place form after a Fill,
static arguments in the offsets, nests that must keep their loops (repeated writes, the
result read as a factor, a non-zero start), and threads (OCANNL_AST_THREADS)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import c_contraction, c_region
from ocannl_ast.backends.c_backend import compile_c, render_c
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
    Const,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    SetLocal,
    Symbol,
    index_of,
)
from ocannl_ast.lowering.loop_verify import verify_program

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

I, J, K, S = Symbol(1, "i"), Symbol(2, "j"), Symbol(3, "k"), Symbol(9, "s")
M, N, KK = 37, 45, 41
CALL = "if (ocannl_mm_run_"


def ix(*syms: Symbol) -> tuple[IndexExpr, ...]:
    return tuple(index_of(s) for s in syms)


def add(a: Expr, b: Expr) -> Binary:
    return Binary(BinOp.ADD, a, b)


def mul(a: Expr, b: Expr) -> Binary:
    return Binary(BinOp.MUL, a, b)


C, A, B = Buffer(1, "c", (M, N)), Buffer(2, "a", (M, KK)), Buffer(3, "b", (KK, N))


def _run(prog: LoopProgram, arrays: list[np.ndarray], cache: Path,
         static: tuple[int, ...] = ()) -> None:
    verify_program(prog)
    compile_c(prog, cache_dir=cache)(arrays, static)


def _operands(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((M, KK)).astype(np.float32),
            rng.standard_normal((KK, N)).astype(np.float32))


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * KK)


@pytest.mark.parametrize("order", ["ijk", "kij", "jki"])
@pytest.mark.parametrize("fill", [True, False])
def test_accumulate_form_any_loop_order(order: str, fill: bool, tmp_path: Path) -> None:
    step = SetCell(C, ix(I, J), add(Get(C, ix(I, J)), mul(Get(A, ix(I, K)), Get(B, ix(K, J)))))
    extent = {"i": (I, M), "j": (J, N), "k": (K, KK)}
    nest: ForLoop | SetCell = step
    for ch in reversed(order):
        nest = ForLoop(*extent[ch], nest)
    prog = LoopProgram("acc", (C, A, B), (), Seq((Fill(C, 0.0), nest)) if fill else nest)
    assert CALL in render_c(prog)
    a, b = _operands(1)
    c0 = np.random.default_rng(2).standard_normal((M, N)).astype(np.float32)
    c = c0.copy()
    _run(prog, [c, a, b], tmp_path)
    _close(c, (0 if fill else c0.astype(np.float64)) + a.astype(np.float64) @ b)


def _local_nest(store_value: Expr, init: float = 0.0) -> ForLoop:
    body = Seq((DeclLocal("acc", Const(init)),
                ForLoop(K, KK, SetLocal("acc", add(GetLocal("acc"),
                                                   mul(Get(A, ix(I, K)), Get(B, ix(K, J)))))),
                SetCell(C, ix(I, J), store_value)))
    return ForLoop(I, M, ForLoop(J, N, body))


def test_local_store_and_local_accumulate(tmp_path: Path) -> None:
    a, b = _operands(3)
    c0 = np.random.default_rng(4).standard_normal((M, N)).astype(np.float32)
    for value, base in [(GetLocal("acc"), 0.0), (add(Get(C, ix(I, J)), GetLocal("acc")), c0),
                        (add(GetLocal("acc"), Get(C, ix(I, J))), c0)]:
        prog = LoopProgram("loc", (C, A, B), (), _local_nest(value))
        assert CALL in render_c(prog)
        c = c0.copy()
        _run(prog, [c, a, b], tmp_path)
        _close(c, np.asarray(base, np.float64) + a.astype(np.float64) @ b)


def test_nonzero_start_keeps_the_loops(tmp_path: Path) -> None:
    prog = LoopProgram("start", (C, A, B), (), _local_nest(GetLocal("acc"), init=1.5))
    assert CALL not in render_c(prog)
    a, b = _operands(5)
    c = np.empty((M, N), np.float32)
    _run(prog, [c, a, b], tmp_path)
    _close(c, 1.5 + a.astype(np.float64) @ b)


def test_repeated_writes_keep_the_loops(tmp_path: Path) -> None:
    # c[i] = sum_k a[i,k] * b[k,j] for every j: the last j wins, as in the loops.
    c1 = Buffer(1, "c", (M,))
    body = Seq((DeclLocal("acc", Const(0.0)),
                ForLoop(K, KK, SetLocal("acc", add(GetLocal("acc"),
                                                   mul(Get(A, ix(I, K)), Get(B, ix(K, J)))))),
                SetCell(c1, ix(I), GetLocal("acc"))))
    prog = LoopProgram("rep", (c1, A, B), (), ForLoop(I, M, ForLoop(J, N, body)))
    assert CALL not in render_c(prog)
    a, b = _operands(6)
    c = np.empty(M, np.float32)
    _run(prog, [c, a, b], tmp_path)
    _close(c, a.astype(np.float64) @ b[:, -1])


def test_result_read_as_a_factor_keeps_the_loops() -> None:
    sq = Buffer(1, "sq", (M, M))
    step = SetCell(sq, ix(I, J), add(Get(sq, ix(I, J)), mul(Get(sq, ix(I, K)), Get(sq, ix(K, J)))))
    prog = LoopProgram("self", (sq,), (), ForLoop(I, M, ForLoop(J, M, ForLoop(K, M, step))))
    assert CALL not in render_c(prog)


def test_static_argument_offsets(tmp_path: Path) -> None:
    # c[i, j] = sum_k a[s, i, k] * b[k, j]: a batch picked by a static argument.
    a3 = Buffer(2, "a", (3, M, KK))
    idx = (index_of(S), index_of(I), index_of(K))
    body = Seq((DeclLocal("acc", Const(0.0)),
                ForLoop(K, KK, SetLocal("acc", add(GetLocal("acc"),
                                                   mul(Get(a3, idx), Get(B, ix(K, J)))))),
                SetCell(C, ix(I, J), GetLocal("acc"))))
    prog = LoopProgram("st", (C, a3, B), (S,),
                       Seq((CheckIndex(index_of(S), 3, 1), ForLoop(I, M, ForLoop(J, N, body)))))
    assert CALL in render_c(prog)
    rng = np.random.default_rng(7)
    a = rng.standard_normal((3, M, KK)).astype(np.float32)
    b = rng.standard_normal((KK, N)).astype(np.float32)
    for s in range(3):
        c = np.empty((M, N), np.float32)
        _run(prog, [c, a, b], tmp_path, (s,))
        _close(c, a[s].astype(np.float64) @ b)


def test_float64_program(tmp_path: Path) -> None:
    c64 = Buffer(1, "c", (M, N))
    prog = LoopProgram("f64", (c64, A, B), (), _local_nest(GetLocal("acc")),
                       Precision.FLOAT64)
    assert "ocannl_mm_run_d(" in render_c(prog)
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((M, KK)), rng.standard_normal((KK, N))
    c = np.empty((M, N))
    _run(prog, [c, a, b], tmp_path)
    np.testing.assert_allclose(c, a @ b, rtol=0, atol=1e-13 * KK)


# ---- threads ---------------------------------------------------------------------------


def _big_matmul(m: int, k: int, n: int) -> tuple[oc.Tensor, np.ndarray]:
    rng = np.random.default_rng(9)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return (oc.einsum("ij;jk=>ik", oc.ndarray(a), oc.ndarray(b)),
            a.astype(np.float64) @ b.astype(np.float64))


@pytest.mark.parametrize("shape", [(200, 200, 200), (8, 600, 512), (9, 1000, 250),
                                   (1000, 300, 9)])
def test_threads_give_identical_results(shape: tuple[int, int, int],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # Above PARALLEL_WORK; split over M (many row tiles) or over N (few row tiles).
    assert np.prod(shape) >= c_contraction.PARALLEL_WORK
    # With threads, the call is made by the team of the routine's parallel region (-n), or
    # forks its own threads where the routine has no region (n).
    results = {}
    for threads, region in (("1", True), ("2", True), ("3", True), ("2", False)):
        monkeypatch.setenv("OCANNL_AST_THREADS", threads)
        monkeypatch.setattr(c_region, "usable", c_region.usable if region else
                            lambda parts: False)
        y, want = _big_matmul(*shape)
        src = oc.render(y.forward)
        n = f"-{threads}" if threads != "1" and region else threads
        assert f", {n}, ocannl_mmd0)" in src
        results[n] = oc.eval(y)
        np.testing.assert_allclose(results[n], want, rtol=0, atol=1e-5 * shape[1])
    for n in ("-2", "-3", "2"):
        np.testing.assert_array_equal(results["1"], results[n])


def test_small_kernels_stay_single_threaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_THREADS", "2")
    y, want = _big_matmul(40, 40, 40)
    assert ", 1, ocannl_mmd0)" in oc.render(y.forward)
    np.testing.assert_allclose(oc.eval(y), want, rtol=0, atol=1e-5 * 40)


def test_threads_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_THREADS", "auto")
    assert c_contraction.threads_setting() >= 1


@pytest.mark.parametrize("bad", ["0", "-2", "two", "1.5"])
def test_bad_thread_setting_is_a_backend_error(monkeypatch: pytest.MonkeyPatch, bad: str) -> None:
    monkeypatch.setenv("OCANNL_AST_THREADS", bad)
    y, _ = _big_matmul(40, 40, 40)
    with pytest.raises(oc.BackendError, match="OCANNL_AST_THREADS"):
        oc.eval(y)


@pytest.mark.parametrize("third", ["k", "ik", "kj", "j", "i", "ij"])
def test_third_factor_on_either_side(third: str, tmp_path: Path) -> None:
    # c[i, j] = sum_k a[i, k] * b[k, j] * e[third]; "ij" fits neither side's panels but is
    # constant over k: the call, then c[i, j] *= e[i, j].
    sym = {"i": (I, M), "j": (J, N), "k": (K, KK)}
    e_buf = Buffer(4, "e", tuple(sym[ch][1] for ch in third))
    e_get = Get(e_buf, tuple(index_of(sym[ch][0]) for ch in third))
    term = mul(mul(Get(A, ix(I, K)), e_get), Get(B, ix(K, J)))
    body = Seq((DeclLocal("acc", Const(0.0)),
                ForLoop(K, KK, SetLocal("acc", add(GetLocal("acc"), term))),
                SetCell(C, ix(I, J), GetLocal("acc"))))
    prog = LoopProgram("third", (C, A, B, e_buf), (), ForLoop(I, M, ForLoop(J, N, body)))
    src = render_c(prog)
    assert CALL in src
    assert ("c = e * (a * b)" in src) == (third == "ij")
    a, b = _operands(10)
    e = np.random.default_rng(11).standard_normal(e_buf.dims).astype(np.float32)
    c = np.empty((M, N), np.float32)
    _run(prog, [c, a, b, e], tmp_path)
    want = np.einsum(f"ik,kj,{third}->ij", a.astype(np.float64), b, e)
    _close(c, want)


def test_enclosing_loop_iterator_in_the_offsets(tmp_path: Path) -> None:
    # for s: c[s, i, j] = sum_k a[s, i, k] * b[k, j], the s loop outside the matched nest.
    c3, a3 = Buffer(1, "c", (3, M, N)), Buffer(2, "a", (3, M, KK))
    body = Seq((DeclLocal("acc", Const(0.0)),
                ForLoop(K, KK, SetLocal("acc", add(GetLocal("acc"),
                                                   mul(Get(a3, ix(S, I, K)), Get(B, ix(K, J)))))),
                SetCell(c3, ix(S, I, J), GetLocal("acc"))))
    inner = ForLoop(I, M, ForLoop(J, N, body))
    prog = LoopProgram("outer", (c3, a3, B), (),
                       ForLoop(S, 3, Seq((Fill(Buffer(4, "z", ()), 0.0), inner))))
    prog = LoopProgram("outer", (c3, a3, B, Buffer(4, "z", ())), (), prog.body)
    assert CALL in render_c(prog)
    rng = np.random.default_rng(12)
    a = rng.standard_normal((3, M, KK)).astype(np.float32)
    b = rng.standard_normal((KK, N)).astype(np.float32)
    c = np.empty((3, M, N), np.float32)
    _run(prog, [c, a, b, np.empty((), np.float32)], tmp_path)
    _close(c, a.astype(np.float64) @ b)


@pytest.mark.parametrize("third", [False, True])
def test_o2_and_o3_agree_bit_for_bit(third: bool, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OCANNL_AST_CFLAGS", raising=False)
    e_buf = Buffer(4, "e", (KK,))
    term: Expr = mul(Get(A, ix(I, K)), Get(B, ix(K, J)))
    if third:
        term = mul(term, Get(e_buf, ix(K)))
    step = SetCell(C, ix(I, J), add(Get(C, ix(I, J)), term))
    body = Seq((Fill(C, 0.0), ForLoop(I, M, ForLoop(J, N, ForLoop(K, KK, step)))))
    prog = LoopProgram("o2o3", (C, A, B, e_buf), (), body)
    a, b = _operands(13)
    e = np.random.default_rng(14).standard_normal(KK).astype(np.float32)
    out = []
    for flags in (("-O2", "-march=native"), ("-O3", "-march=native")):
        c = np.empty((M, N), np.float32)
        compile_c(prog, opt_flags=flags, cache_dir=tmp_path)([c, a, b, e])
        out.append(c)
    np.testing.assert_array_equal(out[0], out[1])
    want = np.einsum("ik,kj,k->ij", a.astype(np.float64), b, e if third else np.ones(KK))
    _close(out[0], want)
