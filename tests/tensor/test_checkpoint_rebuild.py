"""Checkpoints of a model rebuilt, from the user's side (issue 20, items 3 and 4): a
checkpoint holds state only (params, optimizer state, counters), never scratch shaped by the
batch, so it loads into the model built with another batch size in a new process; building
the same model again in a fresh context gives the same names; `ctx.load(path, by="order")`
for a model rebuilt under other names; mismatches name the user's param and hint."""

# Written partly in the @op/@cd dialect: names declared inline exist after rewriting.
# ruff: noqa: F821, F841

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import ocannl_ast as oc

RNG = np.random.default_rng(20)
XS = RNG.normal(size=(16, 4, 3))
TS = RNG.normal(size=(16, 1))


def _max_model(batch: int) -> tuple[oc.Tensor, oc.Tensor, oc.Tensor]:
    """relu(linear) max-reduced over the sequence axis (its gradient counts ties in a
    batch-shaped scratch node), then a linear head; mse."""
    x = oc.term("x", batch_dims=[batch], output_dims=[4, 3])
    t = oc.term("t", batch_dims=[batch], output_dims=[1])
    h = oc.relu(oc.nn.linear(5)(x))
    pooled = oc.einsum_max("b|s,f=>b|f", h)
    return x, t, oc.nn.mse(oc.nn.linear(1)(pooled), t)


def test_checkpoint_holds_state_not_scratch(tmp_path: Path) -> None:
    x, t, loss = _max_model(16)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])
    ctx.set(x, XS)
    ctx.set(t, TS)
    step()
    ctx.save(tmp_path / "c.safetensors")
    entries = load_file(tmp_path / "c.safetensors")
    params = {p.name for p in loss.params()}
    assert len(params) == 4
    want = params | {f"{p}/adam_{s}" for p in params for s in ("m", "v", "c1", "c2")}
    # no tie counts of the max gradient (shaped (16, ...)), no Adam denominator: scratch
    # that every step overwrites whole before reading it
    assert set(entries) == want
    assert all(16 not in v.shape for v in entries.values())


def test_user_nodes_carried_across_runs_are_state(tmp_path: Path) -> None:
    @oc.cd
    def accumulate(x):
        {scratch}[...] = 2.0 * x  # overwritten whole before it is read: not state
        {total}[...] = total + scratch  # read before written: carried across runs

    x = oc.term("x", output_dims=[3])
    ctx = oc.Context()
    step = ctx.compile(accumulate(x))
    ctx.set(x, [1.0, 2.0, 3.0])
    step()
    step()
    ctx.save(tmp_path / "n.safetensors")
    entries = load_file(tmp_path / "n.safetensors")
    assert [n.split("#")[0] for n in entries] == ["total"]
    np.testing.assert_array_equal(next(iter(entries.values())), [4.0, 8.0, 12.0])


_BATCH = """
import sys
import numpy as np
import ocannl_ast as oc
sys.path.insert(0, sys.argv[4])
from test_checkpoint_rebuild import XS, TS, _max_model

mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "A":  # train at batch 16, save; the same (uninterrupted) model's loss at 4
    x, t, loss = _max_model(16)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.05)])
    ctx.set(x, XS)
    ctx.set(t, TS)
    for _ in range(5):
        step()
    ctx.save(path)
    params = loss.params()
    ctx2 = oc.Context()  # the batch-4 model with the trained values
    x4b, t4b, loss4 = _max_model(4)
    oc.infer_shapes(loss4)
    for p, q in zip(params, loss4.params(), strict=True):
        ctx2.set(q, ctx.get(p))
    ctx2.set(x4b, XS[:4])
    ctx2.set(t4b, TS[:4])
    np.savez(out, loss=ctx2.eval(loss4), names=[p.name for p in params],
             **{f"p{i}": ctx.get(p) for i, p in enumerate(params)})
else:  # a new process: the model at batch 4, trained with its own step routine
    x, t, loss = _max_model(4)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.05)])
    ctx.load(path)
    ctx.set(x, XS[:4])
    ctx.set(t, TS[:4])
    loaded = {f"p{i}": ctx.get(p) for i, p in enumerate(loss.params())}
    before = ctx.eval(loss)
    step()
    np.savez(out, loss=before, after=ctx.eval(loss), names=[p.name for p in loss.params()],
             **loaded)
"""


def test_save_at_batch_16_load_at_batch_4_in_a_new_process(tmp_path: Path) -> None:
    script = tmp_path / "batch.py"
    script.write_text(textwrap.dedent(_BATCH))
    ckpt = str(tmp_path / "b16.safetensors")
    outs = {m: tmp_path / f"{m}.npz" for m in "AB"}
    for mode in "AB":
        run = subprocess.run([sys.executable, str(script), mode, ckpt, str(outs[mode]),
                              str(Path(__file__).parent)], capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]
    a, b = np.load(outs["A"]), np.load(outs["B"])
    assert list(a["names"]) == list(b["names"]), "the same names in a fresh process"
    for i in range(len(a["names"])):
        assert a[f"p{i}"].tobytes() == b[f"p{i}"].tobytes()  # loaded exactly
    assert b["loss"].item() == a["loss"].item(), "same loss on the same data"
    assert np.isfinite(b["after"].item()) and b["after"].item() != b["loss"].item()
