"""Memory of a training step from the user's side (issue 19): the bytes a context holds
against the bound "static state + the largest set of intermediates live at once" (by a
liveness analysis of the routine's assignments), on the transformer benchmark's model;
storage sharing, scalar locals and recomputed cheap nodes leave every loss and parameter
bit-identical; the liveness analysis counts an intermediate only while it is live."""

from __future__ import annotations

import dataclasses
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.lowering import assignments as A
from ocannl_ast.lowering.asgn_analysis import lifetimes
from ocannl_ast.lowering.loop_ir import BinOp, Buffer, Comment, Symbol, index_of

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import transformer_model as tm

#: the quick model with activations large enough for the arenas (>= 64 cells)
SMALL = dataclasses.replace(tm.QUICK, d_model=16, hidden=32, context=8, batch=4)


def _train(cfg: tm.Config, steps: int = 3) -> tuple[oc.Context, oc.Routine, list[bytes]]:
    """The benchmark's step trained `steps` times: the context, the step, and the bytes of
    each loss and of every parameter after."""
    ids, tgt = tm.data(cfg)
    ctx = oc.Context()
    step, loss, _ = tm.build_ocannl(cfg, ids, tgt, ctx)
    out = []
    for i in range(steps):
        step(batch=i % cfg.n_batches)
        out.append(ctx.get(loss).tobytes())
    params = sorted(loss.params(), key=lambda p: p.name)
    out += [ctx.get(p).tobytes() for p in params]
    ctx.params_bytes = sum(ctx.get(p).nbytes for p in params)  # type: ignore[attr-defined]
    return ctx, step, out


@pytest.mark.parametrize("cfg", [tm.QUICK, SMALL], ids=["quick", "small"])
def test_transformer_step_holds_at_most_twice_the_liveness_bound(cfg: tm.Config) -> None:
    ctx, _, _ = _train(cfg)
    rep = ctx.memory_report()
    assert rep.static_bytes >= 4 * ctx.params_bytes  # type: ignore[attr-defined]
    ids, tgt = tm.data(cfg)
    data = 4 * (ids.size + tgt.size * cfg.vocab)  # token ids and one-hot targets, float32
    assert rep.state_bytes - rep.static_bytes >= data  # the data set, once
    assert rep.live_peak_bytes > 0
    assert rep.ratio <= 2.0, str(rep)


def test_sharing_recomputing_and_locals_leave_training_bit_identical(
        monkeypatch: pytest.MonkeyPatch) -> None:
    _, step, on = _train(SMALL)
    body = step.prog.body
    notes = [s.text for s in getattr(body, "stmts", ()) if isinstance(s, Comment)]
    assert any(n.startswith("arena:") for n in notes)
    assert any(n.startswith("scalarized:") for n in notes)
    monkeypatch.setenv("OCANNL_AST_SCHEDULE", "0")  # no arenas, no locals
    _, _, no_sharing = _train(SMALL)
    monkeypatch.setenv("OCANNL_AST_VIRTUALIZE", "0")  # nothing inlined or recomputed
    _, _, plain = _train(SMALL)
    assert on == no_sharing == plain


def test_sharing_shrinks_what_the_transformer_step_holds(
        monkeypatch: pytest.MonkeyPatch) -> None:
    shared = _train(SMALL)[0].memory_report()
    monkeypatch.setenv("OCANNL_AST_SCHEDULE", "0")
    monkeypatch.setenv("OCANNL_AST_VIRTUALIZE", "0")
    plain = _train(SMALL)[0].memory_report()
    assert shared.state_bytes == plain.state_bytes
    assert shared.live_peak_bytes == plain.live_peak_bytes  # the bound is the program's
    assert shared.allocated_bytes < 0.75 * plain.allocated_bytes


def test_adam_denominator_is_scratch_not_state() -> None:
    """Adam's denominator is overwritten whole before every read: no buffer of its own in
    a step whose params are large enough to share storage, and not saved as state."""
    rng = np.random.default_rng(0)
    x = oc.ndarray(rng.normal(size=(8, 32)).astype(np.float32), batch_axes=1)
    t = oc.ndarray(rng.normal(size=(8, 32)).astype(np.float32), batch_axes=1)
    loss = oc.nn.mse(oc.nn.mlp([32, 32])(x), t)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.1)])
    step()
    step()
    names = [b.name for b in step.prog.buffers]
    assert any(n.startswith("adam_m") for n in names)
    assert not any(n.startswith("adam_den") for n in names)
    held = [ctx.name_of(h) for h in ctx.holdings.values()]
    assert any(n.endswith("adam_v") for n in held)
    assert not any("adam_den" in n for n in held)


def _acc(lhs: Buffer, *rhs: Buffer, accum: BinOp = BinOp.ARG2, init: bool = False) -> A.Accum:
    i = Symbol(900 + lhs.id, "i")
    proj = A.Projections(((i, 8),), (index_of(i),), tuple((index_of(i),) for _ in rhs),
                         (8,), tuple((8,) for _ in rhs))
    expr: A.RhsExpr = A.Arg(0) if len(rhs) == 1 else A.Prim(BinOp.ADD, (A.Arg(0), A.Arg(1)))
    return A.Accum(lhs, accum, init, expr, rhs, proj)


def test_liveness_counts_an_intermediate_only_while_it_is_live() -> None:
    x, out = Buffer(1, "x", (8,)), Buffer(2, "out", (8,))
    t1, t2, t3 = (Buffer(10 + k, f"t{k}", (8,)) for k in range(3))
    carried = Buffer(20, "carried", (8,))
    asgn = A.seq(_acc(t1, x), _acc(t2, t1), _acc(t3, t2), _acc(out, t3, x))
    lt = lifetimes(asgn)
    assert lt.peak_cells(frozenset({x.id, out.id})) == 16  # two of t1, t2, t3 at a time
    assert lt.peak_cells(frozenset()) == 24  # x and two others
    # read before written: a value from the run before, live over the whole routine
    asgn = A.seq(_acc(t1, x), _acc(t2, t1), _acc(carried, t2, accum=BinOp.ADD),
                 _acc(out, carried))
    assert lifetimes(asgn).peak_cells(frozenset({x.id, out.id})) == 24
