"""The C backend's one OpenMP parallel region per routine call (`backends.c_region`): a
transformer LM training step gives the same bits (losses and parameters after several
AdamW steps) at 1, 2 and 3 threads, with every nest and kernel call that can be shared out
shared out, split into translation units or not; the step enters one parallel region; a
static argument's bound check still returns its error before anything runs, and a bound
check after a parallel loop makes the routine fall back to a fork and a join per loop."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import c_backend, c_contraction, c_region
from ocannl_ast.backends.c_backend import compile_c, render_c
from ocannl_ast.errors import RuntimeDataError
from ocannl_ast.lowering import parallel
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
    ForLoop,
    Get,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    Symbol,
    SymbolValue,
    Unary,
    UnOp,
    index_of,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import transformer_model as tm

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

#: the issue's model, smaller: 2 heads, 1 block, context 8, batch 4 (kernel calls remain)
CFG = tm.Config(vocab=20, d_model=16, heads=2, blocks=1, hidden=32, context=8, batch=4,
                n_batches=2)
STEPS = 4


def _share_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every independent nest and every kernel call on threads (no work thresholds)."""
    monkeypatch.setattr(parallel, "MIN_WORK", 1)
    monkeypatch.setattr(c_contraction, "PARALLEL_WORK", 1)
    monkeypatch.setattr(c_contraction, "PARALLEL_BATCH_WORK", 1)


def _train(threads: int, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    monkeypatch.setenv("OCANNL_AST_THREADS", str(threads))
    ids, tgt = tm.data(CFG)
    ctx = oc.Context()
    step, loss, _ = tm.build_ocannl(CFG, ids, tgt, ctx)
    out = []
    for i in range(STEPS):
        step(batch=i % CFG.n_batches)
        out.append(ctx.get(loss).tobytes())
    with pytest.raises(RuntimeDataError, match="batch"):  # checked before the region
        step(batch=CFG.n_batches)
    return out + [ctx.get(p).tobytes() for p in sorted(loss.params(), key=lambda p: p.name)]


def test_transformer_step_same_bits_at_1_2_and_3_threads(monkeypatch: pytest.MonkeyPatch,
                                                         tmp_path: Path) -> None:
    _share_everything(monkeypatch)
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path))
    one = _train(1, monkeypatch)
    assert _train(2, monkeypatch) == one
    assert _train(3, monkeypatch) == one
    monkeypatch.setattr(c_backend, "SPLIT_MIN_LINES", 0)  # several translation units
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", "3")
    assert _train(2, monkeypatch) == one
    units = list(tmp_path.glob("*.u1.c"))
    assert units, "the step was split into translation units"


def test_transformer_step_renders_one_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """One ``omp parallel`` (the entry point's) and no fork of a kernel: its calls are made
    by the team (``-2``); loops are worksharing loops of that team."""
    _share_everything(monkeypatch)
    monkeypatch.setenv("OCANNL_AST_THREADS", "2")
    ids, tgt = tm.data(CFG)
    bi = oc.static_index("batch")
    loss, _ = tm.ocannl_loss(CFG, oc.ndarray(ids, batch_axes=2).batch_slice(bi),
                             oc.ndarray(np.eye(CFG.vocab, dtype=np.float32)[tgt],
                                        batch_axes=2).batch_slice(bi))
    src = oc.render([oc.grad_update(loss), oc.adam_update(loss, learning_rate=1e-3)])
    routine = src[src.index("/* ---- contraction kernel"):]
    routine = routine[routine.index("_f0("):]  # the routine's functions and entry point
    assert routine.count("#pragma omp parallel") == 1
    assert "#pragma omp parallel num_threads(2)" in routine
    assert routine.count("#pragma omp for schedule(static)") > 10
    calls = [ln for ln in routine.splitlines() if "ocannl_mm_run" in ln]
    assert calls and all(", -2, ocannl_mmd" in ln for ln in calls)


# ---- the region's entry point on hand-built programs ---------------------------------------

_SYMS = iter(range(5000, 1_000_000))


def _sym(name: str) -> Symbol:
    return Symbol(next(_SYMS), name)


def _pointwise(dst: Buffer, src: Buffer, n: int) -> ForLoop:
    i = _sym("i")
    return ForLoop(i, n, SetCell(dst, (index_of(i),), Unary(UnOp.EXP, Get(src, (index_of(i),)))),
                   threads=2)


def test_bound_check_after_a_parallel_loop_forks_per_loop(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A static argument's check after a parallel loop: no region (an error must return
    before the reads it guards), each loop its own fork and join; the values and the error
    are the same."""
    monkeypatch.setenv("OCANNL_AST_THREADS", "2")
    x, y, z = Buffer(1, "x", (64,)), Buffer(2, "y", (64,)), Buffer(3, "z", (4, 64))
    batch, j = _sym("batch"), _sym("j")
    body = Seq((_pointwise(y, x, 64), CheckIndex(index_of(batch), 4, code=9),
                ForLoop(j, 64, SetCell(z, (index_of(batch), index_of(j)),
                                       Binary(BinOp.ADD, Get(y, (index_of(j),)),
                                              SymbolValue(batch))))))
    prog = LoopProgram("late_check", (x, y, z), (batch,), body, Precision.FLOAT32)
    src = render_c(prog)
    assert "#pragma omp parallel num_threads" not in src
    assert "#pragma omp parallel for num_threads(2) schedule(static)" in src
    routine = compile_c(prog)
    xs = np.linspace(-1, 1, 64, dtype=np.float32)
    ys, zs = np.zeros(64, np.float32), np.zeros((4, 64), np.float32)
    routine([xs, ys, zs], [2])
    np.testing.assert_allclose(zs[2], np.exp(xs) + np.float32(2), rtol=1e-6)
    with pytest.raises(RuntimeDataError, match="code 9"):
        routine([xs, ys, zs], [4])


def test_region_entry_runs_serial_functions_on_the_master(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Serial nests around parallel ones: the master runs them, a barrier only before a
    parallel loop that follows them; the values are NumPy's."""
    monkeypatch.setenv("OCANNL_AST_THREADS", "2")
    monkeypatch.setattr(c_backend, "FUNCTION_LINES", 1)  # one function per nest
    a, b, c, d = (Buffer(k, n, (256,)) for k, n in enumerate("abcd", start=1))
    i, k = _sym("i"), _sym("k")
    serial = ForLoop(i, 256, SetCell(c, (index_of(i),), Binary(BinOp.MUL, Get(b, (index_of(i),)),
                                                                Get(a, (index_of(i),)))))
    serial2 = ForLoop(k, 256, SetCell(d, (index_of(k),), Unary(UnOp.NEG, Get(c, (index_of(k),)))))
    prog = LoopProgram("mixed", (a, b, c, d), (), Seq((
        _pointwise(b, a, 256), serial, serial2, _pointwise(a, d, 256))), Precision.FLOAT32)
    src = render_c(prog)
    entry = src[src.index("int mixed("):]
    assert entry.count("#pragma omp parallel num_threads(2)") == 1
    assert entry.count("#pragma omp master") == 1 and entry.count("#pragma omp barrier") == 1
    assert entry.index("mixed_f0(") < entry.index("#pragma omp master") \
        < entry.index("mixed_f2(") < entry.index("#pragma omp barrier") < entry.index("mixed_f3(")
    a0 = np.linspace(-2, 2, 256, dtype=np.float32)
    got = {}
    for threads in ("2", "1"):
        monkeypatch.setenv("OCANNL_AST_THREADS", threads)
        arrays = [a0.copy()] + [np.zeros(256, np.float32) for _ in range(3)]
        compile_c(prog)(arrays)
        got[threads] = [x.tobytes() for x in arrays]
        b_want = np.exp(a0)
        np.testing.assert_allclose(arrays[1], b_want, rtol=1e-6)
        np.testing.assert_allclose(arrays[3], -(arrays[1] * a0), rtol=0)
        np.testing.assert_allclose(arrays[0], np.exp(arrays[3]), rtol=1e-6)
    assert got["1"] == got["2"]


def test_region_usable_only_with_team_work_and_early_checks() -> None:
    class P:
        def __init__(self, team: bool, index_checks: bool = False) -> None:
            self.team, self.index_checks, self.checked = team, index_checks, index_checks

    assert not c_region.usable([P(False), P(False)])
    assert c_region.usable([P(False, True), P(True), P(False)])
    assert not c_region.usable([P(True), P(False, True)])
    lines = c_region.entry_lines([P(False, True), P(True), P(False), P(True)],
                                 ["f0()", "f1()", "f2()", "f3()"], 4)
    assert lines[0] == "  if ((rc = f0()) != 0) return rc;"
    assert "#pragma omp parallel num_threads(4)" in lines and lines[-1] == "  return ocannl_rc;"
