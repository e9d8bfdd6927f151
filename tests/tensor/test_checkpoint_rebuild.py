"""Checkpoints of a model rebuilt, from the user's side (issue 20, items 3 and 4): a
checkpoint holds state only (params, optimizer state, counters), never scratch shaped by the
batch, so it loads into the model built with another batch size in a new process; building
the same model again in a fresh context gives the same names; `ctx.load(path, by="order")`
for a model rebuilt under other names; mismatches name the user's param and hint."""

# Written partly in the @op/@cd dialect: names declared inline exist after rewriting.
# ruff: noqa: F821

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


def test_nodes_shaped_by_the_batch_are_not_state(tmp_path: Path) -> None:
    @oc.cd
    def per_row(x):
        {rows}[...] = rows + x  # carried, but it has the batch axis of x: per-batch data

    x = oc.term("x", batch_dims=[4], output_dims=[3])
    ctx = oc.Context()
    step = ctx.compile(per_row(x))
    ctx.set(x, np.ones((4, 3)))
    step()
    ctx.save(tmp_path / "rows.safetensors")
    assert load_file(tmp_path / "rows.safetensors") == {}


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
                              str(Path(__file__).parent)],
                             check=False, capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-3000:]
    a, b = np.load(outs["A"]), np.load(outs["B"])
    assert list(a["names"]) == list(b["names"]), "the same names in a fresh process"
    for i in range(len(a["names"])):
        assert a[f"p{i}"].tobytes() == b[f"p{i}"].tobytes()  # loaded exactly
    assert b["loss"].item() == a["loss"].item(), "same loss on the same data"
    assert np.isfinite(b["after"].item()) and b["after"].item() != b["loss"].item()


@oc.op
def regressor(x):
    hidden = oc.nn.linear(6)
    return oc.nn.linear(1)(oc.relu(hidden(x)))


X2 = RNG.normal(size=(8, 2))
T2 = RNG.normal(size=(8, 1))


class Build:
    """One build of a small regression model with its Adam training step."""

    def __init__(self, dims: int = 2) -> None:
        self.x = oc.term("x", batch_dims=[8], output_dims=[dims])
        self.t = oc.term("t", batch_dims=[8], output_dims=[1])
        self.loss = oc.nn.mse(regressor(self.x), self.t)
        self.params = self.loss.params()
        self.train = [oc.grad_update(self.loss), oc.adam_update(self.loss, learning_rate=0.05)]

    def context(self) -> tuple[oc.Context, oc.Routine]:
        ctx = oc.Context()
        step = ctx.compile(self.train)
        ctx.set(self.x, X2 if self.x.dims()[-1] == 2 else np.ones((8, self.x.dims()[-1])))
        ctx.set(self.t, T2)
        return ctx, step

    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def values(self, ctx: oc.Context) -> list[bytes]:
        return [ctx.get(p).tobytes() for p in self.params]


def test_rebuilding_in_a_fresh_context_gives_the_same_names(tmp_path: Path) -> None:
    """Re-running a notebook cell: build, create a context, train, save; then again."""
    first = Build()
    ctx1, step1 = first.context()
    for _ in range(3):
        step1()
    ctx1.save(tmp_path / "cell.safetensors")
    second = Build()  # built after ctx1 was created: a new naming epoch
    assert second.names() == first.names()
    assert [n.split(".", 1)[1] for n in first.names()] == \
        ["linear.w", "linear.b", "linear_1.w", "linear_1.b"]
    ctx2, step2 = second.context()
    ctx2.load(tmp_path / "cell.safetensors")  # by name
    assert second.values(ctx2) == first.values(ctx1)
    step1()
    step2()
    assert second.values(ctx2) == first.values(ctx1), "resumes bit-identically"
    # the default init is keyed by the (stable) name: a fresh rebuild starts identically
    inits = []
    for k in range(2):
        build = Build()
        ctx, _ = build.context()
        ctx.save(tmp_path / f"init{k}.safetensors")
        inits.append(load_file(tmp_path / f"init{k}.safetensors"))
    assert inits[0].keys() == inits[1].keys()
    assert all(np.array_equal(inits[0][n], inits[1][n]) for n in inits[0])


def test_load_by_order_for_a_model_rebuilt_under_other_names(tmp_path: Path) -> None:
    first = Build()
    renamed = Build()  # built in the same naming epoch: every name renumbered
    assert renamed.names() != first.names()
    ctx1, step1 = first.context()
    step1()
    path = tmp_path / "first.safetensors"
    ctx1.save(path)
    assert renamed.names()[0].split(".")[0].startswith("regressor_")
    ctx2, step2 = renamed.context()
    with pytest.raises(oc.CheckpointError) as info:
        ctx2.load(path)
    msg = str(info.value)
    # names the user's param and where it was declared, and hints at by="order"
    assert f"param '{renamed.names()[0]}'" in msg and "declared at" in msg
    assert "by=\"order\"" in msg and "line up" in msg
    assert info.value.span is not None and info.value.span.file == __file__
    ctx2.load(path, by="order")
    assert renamed.values(ctx2) == first.values(ctx1)
    step1()
    step2()  # the optimizer state came along: the same continuation
    assert renamed.values(ctx2) == first.values(ctx1)


def test_load_by_order_mismatches_are_named(tmp_path: Path) -> None:
    first = Build()
    ctx1, _ = first.context()
    path = tmp_path / "first.safetensors"
    ctx1.save(path)
    other = Build(dims=3)  # the first layer's weight has another shape
    ctx2, _ = other.context()
    with pytest.raises(oc.CheckpointError) as info:
        ctx2.load(path)
    assert "by=\"order\"" not in str(info.value), "no hint when the shapes do not line up"
    with pytest.raises(oc.CheckpointError) as info:
        ctx2.load(path, by="order")
    msg = str(info.value)
    assert f"'{other.names()[0]}'" in msg and "1st param (by creation order)" in msg
    assert "has shape" in msg and "declared at" in msg
    # a file that records no order (another tool's) is loaded by name only
    plain = tmp_path / "plain.safetensors"
    save_file(load_file(path), str(plain))
    with pytest.raises(oc.CheckpointError, match="records no creation order"):
        ctx1.load(plain, by="order")
    with pytest.raises(oc.ArgumentError, match="by must be one of"):
        ctx1.load(path, by="shape")
    # an optimizer's state missing by order names the place and the user's tensor
    fwd = oc.Context()
    fwd.compile(first.loss.forward)  # params only
    fwd.save(tmp_path / "params.safetensors")
    with pytest.raises(oc.CheckpointError, match="'p0/adam_c1'|param \\(by creation"):
        ctx1.load(tmp_path / "params.safetensors", by="order")


def test_names_stay_unique_within_a_context(tmp_path: Path) -> None:
    """Two builds of one model in one context (the second after the context was created):
    the later one is renumbered there, with its optimizer state and its own init."""
    first = Build()
    ctx = oc.Context()
    second = Build()
    assert second.names() == first.names()
    ctx.compile(first.train)
    ctx.compile(second.train)
    names = [t.name for t in [*first.params, *second.params]]
    assert len(set(names)) == len(names)
    top = second.names()[0].split(".")[0]
    assert top == "regressor_1"
    ctx.set(first.x, X2)
    ctx.set(first.t, T2)
    ctx.set(second.x, X2)
    ctx.set(second.t, T2)
    path = tmp_path / "both.safetensors"
    ctx.save(path)
    entries = load_file(path)
    for p in second.params:
        assert f"{p.name}/adam_m" in entries, p.name
    assert len(entries) == 2 * 4 * 5
    assert not np.array_equal(entries[first.names()[0]], entries[second.names()[0]]), \
        "the renamed param has its own default init"
    meta = json.loads(json.loads(path.read_bytes()[8:8 + int.from_bytes(
        path.read_bytes()[:8], "little")])["__metadata__"]["ocannl_ast"])
    assert meta["order"][second.names()[0]] == "p4"


def test_contexts_the_library_creates_start_no_epoch() -> None:
    a = oc.param("epoch_probe", output_dims=[2])
    oc.eval(a)  # creates the default context on first use
    b = oc.param("epoch_probe", output_dims=[2])
    assert b.name == "epoch_probe_1"
    oc.Context()
    c = oc.param("epoch_probe", output_dims=[2])
    assert c.name == "epoch_probe"


def _tiny(v: float) -> tuple[oc.Tensor, oc.Tensor]:
    x = oc.ndarray(np.array([[1.0, 2.0], [3.0, -1.0]]), batch_axes=1)
    w = oc.param("tiny_w", output_dims=[1], init=np.array([[v, -0.25]]))
    return w, oc.einsum("b|o=>o", (w @ x) * (w @ x))


def test_a_tensor_known_elsewhere_gets_a_name_local_to_the_context(tmp_path: Path) -> None:
    w1, loss1 = _tiny(0.5)
    ctx_a = oc.Context()
    ctx_a.compile(loss1.forward)
    w2, loss2 = _tiny(2.0)  # a new naming epoch: the same name
    assert w2.name == w1.name
    ctx_b = oc.Context()
    ctx_b.compile(loss2.forward)
    ctx_a.compile(loss2.forward)  # ctx_a knows both: w2 is numbered there only
    assert w2.name == w1.name and ctx_a.name_of(w2) == w1.name + "_1"
    assert ctx_b.name_of(w2) == w2.name
    ctx_a.save(tmp_path / "a.safetensors")
    entries = load_file(tmp_path / "a.safetensors")
    assert entries[w1.name].tolist() == [[0.5, -0.25]]
    assert entries[w1.name + "_1"].tolist() == [[2.0, -0.25]]
    ctx_a.set(w2, [[0.0, 0.0]])
    ctx_a.load(tmp_path / "a.safetensors")
    assert ctx_a.get(w2).tolist() == [[2.0, -0.25]]


def test_step_counters_are_state_and_resume_the_schedule(tmp_path: Path) -> None:
    def build() -> tuple[oc.Tensor, oc.Tensor, oc.Tensor, list[oc.Code]]:
        x = oc.term("x", batch_dims=[8], output_dims=[2])
        t = oc.term("t", batch_dims=[8], output_dims=[1])
        loss = oc.nn.mse(regressor(x), t)
        lr = oc.lr_cosine(0.1, total_steps=6, warmup_steps=2)
        return x, t, loss, [oc.grad_update(loss), oc.adam_update(loss, learning_rate=lr)]

    runs = []
    for _ in range(2):
        x, t, loss, train = build()
        ctx = oc.Context()
        step = ctx.compile(train)
        ctx.set(x, X2)
        ctx.set(t, T2)
        runs.append((ctx, step, loss))
    (ctx1, step1, loss1), (ctx2, step2, loss2) = runs
    for _ in range(3):
        step1()
    ctx1.save(tmp_path / "sched.safetensors")
    entries = load_file(tmp_path / "sched.safetensors")
    counters = [n for n in entries if "/" not in n and n not in {p.name for p in loss1.params()}]
    assert counters and all(entries[n].tolist() == [3.0] for n in counters), counters
    ctx2.load(tmp_path / "sched.safetensors", by="order")  # built in another epoch
    for _ in range(3):  # warmup and decay continue from step 3, not from 0
        step1()
        step2()
    for p1, p2 in zip(loss1.params(), loss2.params(), strict=True):
        assert ctx1.get(p1).tobytes() == ctx2.get(p2).tobytes()


def test_eval_of_a_lone_node_holds_it_unless_batch_shaped(tmp_path: Path) -> None:
    n = oc.node("lone", output_dims=[3])
    m = oc.node("lone_rows", batch_dims=[2], output_dims=[3])
    ctx = oc.Context()
    assert ctx.eval(n).tolist() == [0.0, 0.0, 0.0]
    assert ctx.eval(m).shape == (2, 3)
    ctx.save(tmp_path / "lone.safetensors")
    assert list(load_file(tmp_path / "lone.safetensors")) == [ctx.name_of(n)]


def test_a_file_with_scratch_entries_of_an_earlier_version_loads(tmp_path: Path) -> None:
    """Files saved before scratch was told from state have Adam's denominator (and a
    max-gradient's tie counts): entries this context knows as scratch are ignored."""
    x, t, loss = _max_model(16)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])
    ctx.set(x, XS)
    ctx.set(t, TS)
    step()
    ctx.save(tmp_path / "new.safetensors")
    entries = load_file(tmp_path / "new.safetensors")
    old = dict(entries)
    for p in loss.params():
        old[f"{p.name}/adam_den"] = np.ones_like(entries[p.name])
    old_path = tmp_path / "old.safetensors"
    save_file(old, str(old_path), metadata={"ocannl_ast": '{"version": "1"}'})
    with pytest.warns(UserWarning, match="could not be verified"):
        ctx.load(old_path)
    old["not_a_tensor_here"] = np.zeros(2, np.float32)
    save_file(old, str(old_path))
    with pytest.raises(oc.CheckpointError, match="extra entry 'not_a_tensor_here'"):
        ctx.load(old_path)
