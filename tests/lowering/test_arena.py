"""Storage sharing by liveness (`lowering.arena`): which buffers may share (routine-owned,
fully written before any read) and which must not (kept, accumulated across runs, partly
written), same bits as separate storage, and from the user's side the memory report of a
training step."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends.c_backend import compile_c
from ocannl_ast.lowering.arena import SCRATCH_ID, live_peak_cells, scratch_span, share_storage
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Const,
    Fill,
    ForLoop,
    Get,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    Stmt,
    Symbol,
    Unary,
    UnOp,
    index_of,
)
from ocannl_ast.tensor.memory import MemoryReport

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

_ids = iter(range(5000, 1_000_000))
N = 8
X, OUT = Buffer(1, "x", (N, N)), Buffer(2, "out", (N, N))
T = [Buffer(10 + k, f"t{k}", (N, N)) for k in range(4)]


def _map(dst: Buffer, f: object) -> Stmt:
    i, j = Symbol(next(_ids), "i"), Symbol(next(_ids), "j")
    ix = (index_of(i), index_of(j))
    assert callable(f)
    return ForLoop(i, N, ForLoop(j, N, SetCell(dst, ix, f(ix))))


def _chain() -> LoopProgram:
    """x -> t0 -> t1 -> t2 -> t3 -> out: each t live for two units only."""
    stmts = [_map(T[0], lambda ix: Unary(UnOp.EXP, Get(X, ix)))]
    for k in range(1, 4):
        stmts.append(_map(T[k], lambda ix, k=k: Binary(BinOp.MUL, Get(T[k - 1], ix),
                                                        Const(float(k)))))
    stmts.append(_map(OUT, lambda ix: Binary(BinOp.ADD, Get(T[3], ix), Get(X, ix))))
    return LoopProgram("arena", (X, *T, OUT), (), Seq(tuple(stmts)), Precision.FLOAT32)


def _outputs(prog: LoopProgram, x: np.ndarray, runs: int = 2) -> bytes:
    arrays = [x.copy() if b.id == X.id else np.full(b.dims, 7.0, np.float32)
              for b in prog.buffers]
    routine = compile_c(prog)
    for _ in range(runs):
        routine(arrays)
    return next(a for a, b in zip(arrays, prog.buffers, strict=True) if b.id == OUT.id).tobytes()


def test_a_chain_shares_storage_with_the_same_bits() -> None:
    prog = _chain()
    out = share_storage(prog, frozenset({X.id, OUT.id}), frozenset())
    assert out.shared == frozenset(t.id for t in T)
    assert out.separate_cells == 4 * N * N
    assert out.arena_cells < out.separate_cells
    assert out.peak_live_cells == 2 * N * N
    assert live_peak_cells(prog, frozenset({X.id, OUT.id})) == 2 * N * N
    assert all(b.id not in out.shared for b in out.prog.buffers)
    x = np.random.default_rng(0).normal(size=(N, N)).astype(np.float32)
    assert _outputs(prog, x) == _outputs(out.prog, x)


def test_kept_accumulated_and_partial_buffers_keep_their_storage() -> None:
    acc, part = Buffer(20, "acc", (N, N)), Buffer(21, "part", (N, N))
    stmts = [
        _map(acc, lambda ix: Binary(BinOp.ADD, Get(acc, ix), Get(X, ix))),  # across runs
        _map(T[0], lambda ix: Get(acc, ix)),
        _map(T[1], lambda ix: Get(T[0], ix)),
        _map(T[2], lambda ix: Get(T[1], ix)),
        # part: one row written, the rest keeps what an earlier run left
        ForLoop(j := Symbol(next(_ids), "j"), N, SetCell(part, (index_of(j, 0, 0),
                                                                index_of(j)), Get(T[2], (
                                                                    index_of(j, 0, 0),
                                                                    index_of(j))))),
        _map(OUT, lambda ix: Binary(BinOp.ADD, Get(part, ix), Get(T[2], ix))),
    ]
    prog = LoopProgram("arena2", (X, acc, *T[:3], part, OUT), (), Seq(tuple(stmts)),
                       Precision.FLOAT32)
    out = share_storage(prog, frozenset({X.id, OUT.id, T[1].id}), frozenset())
    assert acc.id not in out.shared and part.id not in out.shared and T[1].id not in out.shared
    x = np.random.default_rng(1).normal(size=(N, N)).astype(np.float32)
    assert _outputs(prog, x, runs=3) == _outputs(out.prog, x, runs=3)


def test_a_fill_becomes_a_loop_over_the_arena() -> None:
    stmts = [Fill(T[0], 2.0), _map(T[1], lambda ix: Get(T[0], ix)),
             _map(T[2], lambda ix: Binary(BinOp.ADD, Get(T[1], ix), Get(X, ix))),
             _map(OUT, lambda ix: Get(T[2], ix))]
    prog = LoopProgram("arena3", (X, *T[:3], OUT), (), Seq(tuple(stmts)), Precision.FLOAT32)
    out = share_storage(prog, frozenset({X.id, OUT.id}), frozenset())
    assert T[0].id in out.shared
    x = np.random.default_rng(2).normal(size=(N, N)).astype(np.float32)
    assert _outputs(prog, x) == _outputs(out.prog, x)


def _mlp_step(schedule: str, monkeypatch: pytest.MonkeyPatch) -> tuple[MemoryReport, bytes]:
    monkeypatch.setenv("OCANNL_AST_SCHEDULE", schedule)
    rng = np.random.default_rng(3)
    x = oc.ndarray(rng.normal(size=(32, 16)).astype(np.float32), batch_axes=1)
    t = oc.ndarray(rng.normal(size=(32, 4)).astype(np.float32), batch_axes=1)
    loss = oc.nn.mse(oc.nn.mlp([32, 32, 32, 4], activation=oc.nn.gelu)(x), t)
    oc.infer_shapes(loss)
    ctx = oc.Context()
    prng = np.random.default_rng(4)
    for p in sorted(loss.params(), key=lambda p: p.name):
        ctx.set(p, prng.normal(scale=0.3, size=p.dims()).astype(np.float32))
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])
    for _ in range(3):
        step()
    return ctx.memory_report(), ctx.get(loss).tobytes()


def test_memory_report_of_a_step_shrinks_with_the_arena(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    separate, loss_off = _mlp_step("0", monkeypatch)
    shared, loss_on = _mlp_step("1", monkeypatch)
    assert loss_on == loss_off
    assert shared.allocated_bytes < separate.allocated_bytes
    assert shared.state_bytes == separate.state_bytes > 0
    assert 0 < shared.live_peak_bytes <= separate.allocated_bytes
    assert shared.ratio < separate.ratio
    assert "MB in" in str(shared)


def _two_routines(schedule: str, monkeypatch: pytest.MonkeyPatch, eval_first: bool
                  ) -> tuple[oc.Context, list[oc.Routine], list[bytes]]:
    """A training step and an evaluation on other data, in one context, run in turns
    (`eval_first`: the evaluation, with less scratch, compiled and run first)."""
    monkeypatch.setenv("OCANNL_AST_SCHEDULE", schedule)
    rng = np.random.default_rng(5)
    model = oc.nn.mlp([48, 48, 4], activation=oc.nn.gelu)
    x = oc.ndarray(rng.normal(size=(32, 16)).astype(np.float32), batch_axes=1)
    t = oc.ndarray(rng.normal(size=(32, 4)).astype(np.float32), batch_axes=1)
    x2 = oc.ndarray(rng.normal(size=(64, 16)).astype(np.float32), batch_axes=1)
    loss = oc.nn.mse(model(x), t)
    pred = oc.nn.gelu(model(x2))
    oc.infer_shapes(loss)
    ctx = oc.Context()
    prng = np.random.default_rng(6)
    for p in sorted(loss.params(), key=lambda p: p.name):
        ctx.set(p, prng.normal(scale=0.3, size=p.dims()).astype(np.float32))
    if eval_first:
        ev = ctx.compile(pred.forward)
        ev()
        out = [ctx.get(pred).tobytes()]
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])
    if not eval_first:
        ev = ctx.compile(pred.forward)
        out = []
    for _ in range(3):
        step()
        ev()
        out += [ctx.get(loss).tobytes(), ctx.get(pred).tobytes()]
    return ctx, [step, ev], out


@pytest.mark.parametrize("eval_first", [False, True], ids=["step_first", "eval_first"])
def test_routines_of_a_context_share_one_scratch_block(monkeypatch: pytest.MonkeyPatch,
                                                       eval_first: bool) -> None:
    """Eval first: the step's larger scratch grows the block, the evaluation re-binds."""
    ctx, routines, shared = _two_routines("1", monkeypatch, eval_first)
    arenas = [[b for b in r.prog.buffers if scratch_span(b.id) is not None] for r in routines]
    assert all(arenas)  # both routines store intermediates in arenas
    cells = [sum(math.prod(b.dims) for b in a) for a in arenas]
    block = ctx.arrays[SCRATCH_ID]
    assert block.size == max(cells) < sum(cells)  # the larger routine's, not the sum
    assert not any(scratch_span(b) is not None for b in ctx.arrays)  # views are not counted
    _, _, separate = _two_routines("0", monkeypatch, eval_first)
    assert shared == separate
