"""Checkpoint integrity from the user's side (issue 20 item 8): every entry's digest is
verified on load, before anything changes, so a flipped data byte, a NaN written into a
cell, or two same-shape entries with their names swapped (Adam's moments) is an
oc.CheckpointError naming the entry; a plain safetensors file (no digests) loads with a
warning; and a save that fails or is interrupted after its temporary file exists leaves no
stray file and the old checkpoint intact."""

from __future__ import annotations

import contextlib
import json
import os
import struct
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

import ocannl_ast as oc
from ocannl_ast.tensor import checkpoint

RNG = np.random.default_rng(5)
X = RNG.normal(size=(8, 2))
T = RNG.normal(size=(8, 1))


class Program:
    """A small MLP regression trained by Adam: params and two same-shape moments each."""

    def __init__(self) -> None:
        self.x = oc.term("x", batch_dims=[8], output_dims=[2])
        self.t = oc.term("t", batch_dims=[8], output_dims=[1])
        self.loss = oc.nn.mse(oc.nn.mlp([4, 1])(self.x), self.t)
        self.code = [oc.grad_update(self.loss), oc.adam_update(self.loss, learning_rate=0.05)]
        self.ctx, self.step = self.fresh()

    def fresh(self) -> tuple[oc.Context, oc.Routine]:
        ctx = oc.Context()
        step = ctx.compile(self.code)
        ctx.set(self.x, X)
        ctx.set(self.t, T)
        return ctx, step

    def w(self) -> str:
        return self.loss.params()[0].name


@pytest.fixture
def trained(tmp_path: Path) -> tuple[Program, Path]:
    prog = Program()
    for _ in range(3):
        prog.step()
    path = tmp_path / "model.safetensors"
    prog.ctx.save(path)
    return prog, path


def _metadata(path: Path) -> dict[str, str]:
    with safe_open(str(path), framework="numpy") as f:
        meta = f.metadata()
    assert meta is not None
    return dict(meta)


def _header(path: Path) -> tuple[int, dict[str, Any]]:
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    return 8 + n, json.loads(raw[8:8 + n])


def _rejected(prog: Program, path: Path, *needles: str) -> str:
    """Loading `path` into a fresh context is a located CheckpointError with `needles`, and
    the context's values are what they were."""
    ctx, step = prog.fresh()
    step()
    snapshot = path.parent / "snapshot.safetensors"
    ctx.save(snapshot)
    before = snapshot.read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a rejected file warns of nothing
        with pytest.raises(oc.CheckpointError) as info:
            ctx.load(path)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, msg
    assert info.value.span is not None and info.value.span.file == __file__
    assert Path(__file__).name in msg
    ctx.save(snapshot)
    assert snapshot.read_bytes() == before, "a rejected load changes nothing"
    snapshot.unlink()
    return msg


def test_saved_file_carries_a_digest_per_entry(trained: tuple[Program, Path]) -> None:
    prog, path = trained
    info = json.loads(_metadata(path)["ocannl_ast"])
    entries = load_file(path)
    assert info["version"] == "2"
    assert set(info["digests"]) == set(entries)
    for name, arr in entries.items():
        assert info["digests"][name] == checkpoint.digest(name, arr)
        assert len(info["digests"][name]) == 64
    # a verified file loads without a warning and with the saved values
    ctx, _ = prog.fresh()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ctx.load(path)
    for p in prog.loss.params():
        np.testing.assert_array_equal(ctx.get(p), prog.ctx.get(p))


def test_one_flipped_data_byte_names_the_entry(trained: tuple[Program, Path]) -> None:
    prog, path = trained
    key = f"{prog.w()}/adam_m"
    start, header = _header(path)
    lo, hi = header[key]["data_offsets"]
    raw = bytearray(path.read_bytes())
    raw[start + (lo + hi) // 2] ^= 0x01  # the lowest mantissa bit of some cell
    path.write_bytes(bytes(raw))
    msg = _rejected(prog, path, f"'{key}'", "digest", "damaged")
    assert "'" + prog.w() + "'" not in msg.replace(f"'{key}'", ""), "only the changed entry"


def test_nan_written_into_a_cell_is_caught(trained: tuple[Program, Path]) -> None:
    prog, path = trained
    meta = _metadata(path)
    entries = load_file(path)
    key = prog.w()
    entries[key].reshape(-1)[1] = np.nan
    save_file(entries, str(path), metadata=meta)  # as a user editing it with safetensors
    _rejected(prog, path, f"'{key}'", "does not match its digest")


def test_swapped_names_of_same_shape_entries_are_caught(
        trained: tuple[Program, Path]) -> None:
    prog, path = trained
    meta = _metadata(path)
    entries = load_file(path)
    m, v = f"{prog.w()}/adam_m", f"{prog.w()}/adam_v"
    assert entries[m].shape == entries[v].shape and not np.array_equal(entries[m], entries[v])
    entries[m], entries[v] = entries[v], entries[m]
    save_file(entries, str(path), metadata=meta)
    _rejected(prog, path, f"'{m}'", f"'{v}'", "renamed or swapped")


def test_renamed_entry_and_orphan_digest_are_errors(trained: tuple[Program, Path]) -> None:
    prog, path = trained
    meta = _metadata(path)
    entries = load_file(path)
    key = prog.w()
    renamed = {("extra.w" if k == key else k): v for k, v in entries.items()}
    save_file(renamed, str(path), metadata=meta)
    _rejected(prog, path, "'extra.w'", "has no digest")
    save_file({k: v for k, v in entries.items() if k != key}, str(path), metadata=meta)
    _rejected(prog, path, f"a digest for the entry '{key}'", "no such entry")


@pytest.mark.parametrize("digests", [None, "abc", {"x": 1}])
def test_current_version_without_valid_digests_is_an_error(
        trained: tuple[Program, Path], digests: Any) -> None:
    prog, path = trained
    entries = load_file(path)
    info: dict[str, Any] = {"version": "2", "precision": "float32"}
    if digests is not None:
        info["digests"] = digests
    save_file(entries, str(path), metadata={"ocannl_ast": json.dumps(info)})
    _rejected(prog, path, "no valid per-entry digests")


@pytest.mark.parametrize("metadata", [None, {"ocannl_ast": json.dumps(
    {"version": "1", "precision": "float32"})}], ids=["foreign", "version1"])
def test_file_without_digests_loads_with_a_warning(
        trained: tuple[Program, Path], metadata: dict[str, str] | None) -> None:
    prog, path = trained
    entries = load_file(path)
    plain = path.parent / "plain.safetensors"
    save_file(entries, str(plain), metadata=metadata)  # e.g. written by another tool
    ctx, _ = prog.fresh()
    with pytest.warns(UserWarning, match="could not be verified") as record:
        ctx.load(plain)
    assert record[0].filename == __file__
    for p in prog.loss.params():
        np.testing.assert_array_equal(ctx.get(p), entries[p.name])


def test_foreign_file_with_wrong_entries_is_an_error_not_a_warning(
        trained: tuple[Program, Path]) -> None:
    prog, path = trained
    entries = load_file(path)
    entries.pop(prog.w())
    save_file(entries, str(path))
    _rejected(prog, path, f"missing the entry '{prog.w()}'")


def _stray(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("fail", ["open", "write", "fsync", "replace"])
@pytest.mark.parametrize("kind", [KeyboardInterrupt, RuntimeError])
def test_interrupted_save_leaves_no_temp_file(trained: tuple[Program, Path],
                                             monkeypatch: pytest.MonkeyPatch, fail: str,
                                             kind: type[BaseException]) -> None:
    prog, path = trained
    old = path.read_bytes()
    prog.step()  # a different state: the new file would differ
    real_open = os.open

    def open_then_interrupt(p: Any, flags: int, mode: int = 0o777) -> int:
        fd = real_open(p, flags, mode)  # the temp file now exists
        os.close(fd)
        raise kind("interrupted")

    def interrupt(*args: Any, **kwargs: Any) -> None:
        raise kind("interrupted")

    if fail == "open":
        monkeypatch.setattr(os, "open", open_then_interrupt)
    elif fail == "write":
        monkeypatch.setattr(checkpoint, "_closing_fd", _raising_file(kind))
    else:
        monkeypatch.setattr(os, fail, interrupt)
    with pytest.raises(kind, match="interrupted"):
        prog.ctx.save(path)
    monkeypatch.undo()
    assert _stray(path.parent) == ["model.safetensors"]
    assert path.read_bytes() == old
    # and the same with no old file: nothing at all is left
    fresh = path.parent / "new"
    fresh.mkdir()
    if fail == "open":
        monkeypatch.setattr(os, "open", open_then_interrupt)
    elif fail == "write":
        monkeypatch.setattr(checkpoint, "_closing_fd", _raising_file(kind))
    else:
        monkeypatch.setattr(os, fail, interrupt)
    with pytest.raises(kind):
        prog.ctx.save(fresh / "model.safetensors")
    monkeypatch.undo()
    assert _stray(fresh) == []


def _raising_file(kind: type[BaseException]) -> Callable[[int], Any]:
    """A `_closing_fd` whose file raises `kind` on write (after writing half the data)."""
    real = checkpoint._closing_fd

    class Half:
        def __init__(self, f: Any) -> None:
            self.f = f

        def write(self, data: bytes) -> None:
            self.f.write(data[:len(data) // 2])
            raise kind("interrupted")

    @contextlib.contextmanager
    def wrapper(fd: int) -> Iterator[Half]:
        with real(fd) as f:
            yield Half(f)

    return wrapper
