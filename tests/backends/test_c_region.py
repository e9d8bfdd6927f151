"""The C backend's one OpenMP parallel region per routine call (`backends.c_region`): a
transformer LM training step gives the same bits (losses and parameters after several
AdamW steps) at 1, 2 and 3 threads, with every nest and kernel call that can be shared out
shared out, split into translation units or not; the step enters one parallel region; a
static argument's bound check still returns its error before anything runs, and a bound
check after a parallel loop makes the routine fall back to a fork and a join per loop."""

from __future__ import annotations

import shutil
import subprocess
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


_HARNESS = r"""
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static void* test_malloc(size_t n);
#define malloc test_malloc
@KERNEL@
#undef malloc
static int fail_thread = -1;
static void* test_malloc(size_t n) { return omp_get_thread_num() == fail_thread ? NULL : malloc(n); }
int main(int argc, char** argv) {
  enum { M = 1000, N = 16, K = 32 }; /* offset tables of 3M + 3N + 4K entries: on the heap */
  static float a[M * K], b[K * N], c1[M * N], c2[M * N];
  const int64_t d[] = {1, 1, 1, M, K, 0, N, N, 1, 0, 1, K, 1, 0, N, 0};
  for (int i = 0; i < M * K; ++i) a[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
  for (int i = 0; i < K * N; ++i) b[i] = (float)((i * 104729) % 97) / 48.0f - 1.0f;
  const int serial = ocannl_mm_run_f(a, 0, b, 0, c1, 0, 1, d);
  fail_thread = atoi(argv[1]);
  int rc[2] = {0, 0};
#pragma omp parallel num_threads(2)
  rc[omp_get_thread_num()] = ocannl_mm_run_f(a, 0, b, 0, c2, 0, -2, d);
  printf("%d %d %d %d\n", serial, rc[0], rc[1], memcmp(c1, c2, sizeof c1) == 0);
  return 0;
}
"""


@pytest.mark.parametrize("fail", [-1, 0, 1])
def test_team_kernel_call_without_its_tables_errs_without_hanging(fail: int,
                                                                  tmp_path: Path) -> None:
    """A kernel call made by a team (``-2``) whose offset tables one thread cannot allocate:
    that thread still takes part in every worksharing loop (no other thread waits forever at
    a barrier) and returns an error; with memory, the team's bits are one thread's."""
    from ocannl_ast.backends.c_contraction_kernel import kernel_c

    src = tmp_path / "team.c"
    src.write_text(_HARNESS.replace("@KERNEL@", "\n".join(kernel_c("float", "f"))))
    exe = tmp_path / "team"
    subprocess.run(["gcc", "-O2", "-march=native", "-std=c11", "-ffp-contract=off", "-fopenmp",
                    "-o", str(exe), str(src)], check=True, capture_output=True)
    out = subprocess.run([str(exe), str(fail)], check=True, capture_output=True, text=True,
                         timeout=60).stdout.split()
    if fail == -1:
        assert out == ["0", "0", "0", "1"]
    else:
        rc = [int(out[1]), int(out[2])]
        assert rc[fail] == 1 and rc[1 - fail] == 0
