"""`ctx.save(path)` / `ctx.load(path)` from the user's side: round trips of params and
optimizer state, strict loading (each kind of mismatch an oc.CheckpointError naming the
entry, located at the user's line, leaving the context unchanged), atomic writes, loading
before the first run, and a bit-identical resume in a second process."""

# Written partly in the @cd dialect: names declared inline ({running_sum}) exist after
# rewriting.
# ruff: noqa: F821

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import ocannl_ast as oc

RNG = np.random.default_rng(3)
X = RNG.normal(size=(8, 2))
T = RNG.normal(size=(8, 1))


class Program:
    """An MLP regression trained by an optimizer, compiled in a fresh context."""

    def __init__(self, optimizer: str = "adam", precision: str = "float32",
                 dims: tuple[int, ...] = (6, 1)) -> None:
        self.x = oc.term("x", batch_dims=[8], output_dims=[2])
        self.t = oc.term("t", batch_dims=[8], output_dims=[1])
        self.loss = oc.nn.mse(oc.nn.mlp(list(dims))(self.x), self.t)
        update = (oc.adam_update(self.loss, learning_rate=0.05) if optimizer == "adam" else
                  oc.sgd_update(self.loss, learning_rate=0.05, momentum=0.9))
        self.code = [oc.grad_update(self.loss), update]
        self.ctx, self.step = self.fresh(precision)

    def fresh(self, precision: str = "float32") -> tuple[oc.Context, oc.Routine]:
        ctx = oc.Context(precision=precision)
        step = ctx.compile(self.code)
        ctx.set(self.x, X)
        ctx.set(self.t, T)
        return ctx, step

    def params(self, ctx: oc.Context | None = None) -> list[np.ndarray]:
        return [(ctx or self.ctx).get(p) for p in self.loss.params()]


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.dtype == y.dtype and x.tobytes() == y.tobytes()
                                    for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_round_trip_resumes_identically(tmp_path: Path, optimizer: str, precision: str) -> None:
    prog = Program(optimizer, precision)
    for _ in range(4):
        prog.step()
    path = tmp_path / "ckpt.safetensors"
    prog.ctx.save(path)
    saved = prog.params()
    ctx2, step2 = prog.fresh(precision)
    ctx2.load(str(path))  # str or PathLike
    assert _same(prog.params(ctx2), saved)
    for _ in range(3):
        prog.step()
        step2()
    assert _same(prog.params(ctx2), prog.params())
    # without the optimizer state the continuation differs (the test can fail)
    ctx3, step3 = prog.fresh(precision)
    for p, v in zip(prog.loss.params(), saved, strict=True):
        ctx3.set(p, v)
    step3()
    ctx4, step4 = prog.fresh(precision)
    ctx4.load(path)
    step4()
    assert not _same(prog.params(ctx3), prog.params(ctx4))


def test_file_holds_params_and_state_with_metadata(tmp_path: Path) -> None:
    prog = Program("adam")
    prog.step()
    path = tmp_path / "c.safetensors"
    prog.ctx.save(path)
    entries = load_file(path)
    params = {p.name: p for p in prog.loss.params()}
    for name, p in params.items():
        np.testing.assert_array_equal(entries[name], prog.ctx.get(p))
        assert entries[name].dtype == np.float32
        # one step of Adam: c1 = 1 - beta1, c2 = 1 - beta2
        np.testing.assert_allclose(entries[f"{name}/adam_c1"], 0.1, rtol=1e-6)
        np.testing.assert_allclose(entries[f"{name}/adam_c2"], 0.001, rtol=1e-4)
    assert {n.split("/")[0] for n in entries} == set(params)
    n = struct.unpack("<Q", path.read_bytes()[:8])[0]
    meta = json.loads(path.read_bytes()[8:8 + n])["__metadata__"]
    info = json.loads(meta.pop("ocannl_ast"))
    assert set(info.pop("digests")) == set(entries)  # checked in test_checkpoint_integrity
    order = info.pop("order")  # each entry's place by creation order (test_checkpoint_rebuild)
    assert [order[p.name] for p in sorted(params.values(), key=lambda p: p.id)] == \
        [f"p{i}" for i in range(len(params))]
    assert all(order[f"{n}/adam_m"] == f"{order[n]}/adam_m" for n in params)
    assert info == {"version": "2", "precision": "float32"}
    assert meta == {}
    again = tmp_path / "again.safetensors"
    prog.ctx.save(again)
    assert again.read_bytes() == path.read_bytes(), "equal state, byte-identical file"


def test_save_before_any_run_writes_the_initial_values(tmp_path: Path) -> None:
    prog = Program("adam")
    path = tmp_path / "init.safetensors"
    prog.ctx.save(path)
    entries = load_file(path)
    prog.step()  # the params are not re-initialized by the first run
    ref, ref_step = prog.fresh()
    ref_step()
    assert _same(prog.params(), prog.params(ref))
    for name in entries:
        if name.endswith(("/adam_m", "/adam_v", "/adam_c1", "/adam_c2")):
            assert not entries[name].any()


def test_load_before_the_first_run_is_not_reinitialized(tmp_path: Path) -> None:
    prog = Program("adam")
    path = tmp_path / "ones.safetensors"
    entries = {k: np.full_like(v, 0.25) for k, v in _saved(prog, tmp_path).items()}
    save_file(entries, str(path))
    ctx2, step2 = prog.fresh()
    with pytest.warns(UserWarning, match="could not be verified"):  # no digests
        ctx2.load(path)
    for v in prog.params(ctx2):
        assert (v == np.float32(0.25)).all()
    step2()  # runs from the loaded values: first Adam step from c1 = c2 = 0.25
    assert all(np.isfinite(v).all() for v in prog.params(ctx2))
    assert any(not (v == np.float32(0.25)).all() for v in prog.params(ctx2))


def _saved(prog: Program, tmp_path: Path) -> dict[str, np.ndarray]:
    path = tmp_path / "base.safetensors"
    prog.ctx.save(path)
    return load_file(path)


def _expect_error(ctx: oc.Context, path: Path, *needles: str) -> None:
    snapshot = path.parent / "snapshot.safetensors"
    ctx.save(snapshot)
    before = snapshot.read_bytes()
    with pytest.raises(oc.CheckpointError) as info:
        ctx.load(path)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, msg
    assert info.value.span is not None and info.value.span.file == __file__
    ctx.save(snapshot)
    assert snapshot.read_bytes() == before, "a failed load changes nothing"


Edit = Callable[[dict[str, np.ndarray], str], dict[str, np.ndarray]]


def _drop(e: dict[str, np.ndarray], k: str) -> dict[str, np.ndarray]:
    return {n: v for n, v in e.items() if n != k}


def _add(e: dict[str, np.ndarray], k: str) -> dict[str, np.ndarray]:
    return {**e, k + ".extra": np.zeros(3, np.float32)}


def _reshape(e: dict[str, np.ndarray], k: str) -> dict[str, np.ndarray]:
    return {**e, k: np.zeros((*e[k].shape, 2), np.float32)}


def _retype(e: dict[str, np.ndarray], k: str) -> dict[str, np.ndarray]:
    return {**e, k: e[k].astype(np.float64)}


@pytest.mark.parametrize(("edit", "what"), [(_drop, "missing"), (_add, "extra"),
                                            (_reshape, "shape"), (_retype, "dtype")])
@pytest.mark.parametrize("which", ["param", "state"])
def test_strict_load_names_the_entry(tmp_path: Path, edit: Edit, what: str,
                                     which: str) -> None:
    prog = Program("adam")
    prog.step()
    entries = _saved(prog, tmp_path)
    p = prog.loss.params()[1].name
    key = p if which == "param" else f"{p}/adam_v"
    bad = tmp_path / "bad.safetensors"
    save_file(edit(entries, key), str(bad))
    name = key + ".extra" if what == "extra" else key
    _expect_error(prog.ctx, bad, f"'{name}'", what)


def test_wrong_precision_is_a_dtype_error(tmp_path: Path) -> None:
    prog = Program("adam", "float64")
    path = tmp_path / "f64.safetensors"
    prog.ctx.save(path)
    ctx32, _ = prog.fresh("float32")
    _expect_error(ctx32, path, "dtype float64", "float32")


def test_program_without_compiled_routines_holds_nothing(tmp_path: Path) -> None:
    prog = Program("adam")
    path = tmp_path / "c.safetensors"
    prog.ctx.save(path)
    empty = oc.Context()
    _expect_error(empty, path, "extra entry", "compile the routines")
    empty.save(tmp_path / "empty.safetensors")
    assert load_file(tmp_path / "empty.safetensors") == {}


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all",
                                     b"\xff" * 8 + b"{}", struct.pack("<Q", 2) + b"{]"])
def test_corrupt_file_is_a_checkpoint_error(tmp_path: Path, content: bytes) -> None:
    prog = Program("sgd")
    bad = tmp_path / "corrupt.safetensors"
    bad.write_bytes(content)
    _expect_error(prog.ctx, bad, "not a readable safetensors checkpoint", str(bad))


def test_damaged_header_bytes_never_escape_as_raw_errors(tmp_path: Path) -> None:
    """Any byte of the header (length prefix and JSON) damaged: a CheckpointError, or a
    load that passes every check (then the values are those of a well-formed file)."""
    prog = Program("sgd")
    path = tmp_path / "c.safetensors"
    prog.ctx.save(path)
    good = path.read_bytes()
    n = 8 + struct.unpack("<Q", good[:8])[0]
    rng = np.random.default_rng(5)
    bad = tmp_path / "damaged.safetensors"
    outcomes = set()
    for _ in range(150):
        data = bytearray(good)
        for i in rng.integers(0, n, size=rng.integers(1, 4)):
            data[i] = int(rng.integers(0, 256))
        bad.write_bytes(bytes(data))
        try:
            prog.ctx.load(bad)
            outcomes.add("loaded")
        except oc.CheckpointError:
            outcomes.add("error")
    assert "error" in outcomes


def test_truncated_file_is_a_checkpoint_error(tmp_path: Path) -> None:
    prog = Program("sgd")
    path = tmp_path / "c.safetensors"
    prog.ctx.save(path)
    path.write_bytes(path.read_bytes()[:-5])
    _expect_error(prog.ctx, path, "not a readable safetensors checkpoint")


def test_missing_file_and_foreign_format(tmp_path: Path) -> None:
    prog = Program("sgd")
    _expect_error(prog.ctx, tmp_path / "nope.safetensors", "cannot read checkpoint",
                  "nope.safetensors")
    entries = _saved(prog, tmp_path)
    other = tmp_path / "other.safetensors"
    save_file(entries, str(other), metadata={"ocannl_ast": '{"version": "99"}'})
    _expect_error(prog.ctx, other, "version '99'")
    save_file(entries, str(other), metadata={"ocannl_ast": "garbage"})
    _expect_error(prog.ctx, other, "version 'garbage'")
    save_file(entries, str(other))  # a foreign file with the right entries loads
    with pytest.warns(UserWarning, match="could not be verified"):
        prog.ctx.load(other)


def test_bad_path_argument() -> None:
    ctx = oc.Context()
    for bad in (None, 3, ""):
        with pytest.raises(oc.ArgumentError, match="path"):
            ctx.save(bad)  # type: ignore[arg-type]
        with pytest.raises(oc.ArgumentError, match="path"):
            ctx.load(bad)  # type: ignore[arg-type]


def test_failed_write_leaves_the_old_file_intact(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    prog = Program("adam")
    path = tmp_path / "keep.safetensors"
    prog.ctx.save(path)
    old = path.read_bytes()
    prog.step()

    def broken_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(oc.CheckpointError, match="No space left") as info:
        prog.ctx.save(path)
    assert info.value.span is not None and info.value.span.file == __file__
    monkeypatch.undo()
    assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.safetensors"]


def test_unwritable_destination(tmp_path: Path) -> None:
    prog = Program("sgd")
    with pytest.raises(oc.CheckpointError, match="cannot write checkpoint"):
        prog.ctx.save(tmp_path / "no_such_dir" / "c.safetensors")
    assert not (tmp_path / "no_such_dir").exists()


def test_user_cd_node_is_saved(tmp_path: Path) -> None:
    """Persistent @cd state other than an optimizer's (a running sum) is checkpointed."""

    @oc.cd
    def accumulate(x):
        {running_sum}[...] = running_sum + x

    x = oc.term("x", output_dims=[3])
    code = accumulate(x)
    ctx = oc.Context()
    step = ctx.compile(code)
    ctx.set(x, [1.0, 2.0, 3.0])
    step()
    step()
    path = tmp_path / "node.safetensors"
    ctx.save(path)
    entries = load_file(path)
    (name,) = entries
    assert name.startswith("running_sum")
    np.testing.assert_array_equal(entries[name], [2.0, 4.0, 6.0])
    ctx2 = oc.Context()
    step2 = ctx2.compile(code)
    ctx2.load(path)
    ctx2.set(x, [1.0, 1.0, 1.0])
    step2()
    ctx2.save(path)
    np.testing.assert_array_equal(load_file(path)[name], [3.0, 5.0, 7.0])


_RESUME = """
import sys
import numpy as np
import ocannl_ast as oc

mode, path, out = sys.argv[1], sys.argv[2], sys.argv[3]
rng = np.random.default_rng(11)
xs = rng.normal(size=(16, 2))
ts = (xs[:, :1] * xs[:, 1:] > 0).astype(np.float64)
x = oc.term("x", batch_dims=[16], output_dims=[2])
t = oc.term("t", batch_dims=[16], output_dims=[1])
model = oc.nn.mlp([8, 8, 1])
loss = oc.nn.mse(model(x), t)
ctx = oc.Context()
step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.03)])
ctx.set(x, xs)
ctx.set(t, ts)
if mode == "A":
    for _ in range(5):
        step()
    ctx.save(path)
else:
    ctx.load(path)
step()
step()
np.savez(out, **{p.name: ctx.get(p) for p in loss.params()})
"""


def test_resume_in_a_new_process_is_bit_identical(tmp_path: Path) -> None:
    script = tmp_path / "resume.py"
    script.write_text(textwrap.dedent(_RESUME))
    ckpt = str(tmp_path / "run.safetensors")
    outs = {m: tmp_path / f"{m}.npz" for m in "AB"}
    for mode in "AB":
        subprocess.run([sys.executable, str(script), mode, ckpt, str(outs[mode])],
                       check=True, capture_output=True, text=True)
    a, b = np.load(outs["A"]), np.load(outs["B"])
    assert sorted(a.files) == sorted(b.files) and len(a.files) == 6
    assert all(n.startswith("mlp.linear") for n in a.files)
    for name in a.files:
        assert a[name].dtype == b[name].dtype == np.float32
        assert a[name].tobytes() == b[name].tobytes(), name
