"""Checkpoints: `ctx.save(path)` / `ctx.load(path)` as safetensors files (no pickle).

What a context *holds* (`tensor.holdings`: its state) is what a checkpoint stores: every
parameter, and every persistent node carried from one run to the next (optimizer state
such as Adam's moments and bias corrections, SGD momentum, step counters, a user's @cd
`{x}` nodes that a routine reads before overwriting them), never scratch shaped by the
batch. Each is an entry keyed by its unique `tensor.name` ("mlp.linear.w",
"mlp.linear.w/adam_m"), its logical (unpadded) value in the context's precision; one
metadata key, "ocannl_ast", records the format version, the precision, a digest per entry
and each entry's place by creation order (`order`, for `ctx.load(path, by="order")`) in
one key, so that equal states give byte-identical files.

Integrity: an entry's digest is the sha256 of its name, dtype, shape and raw bytes
(`digest`). Load verifies every digest before it changes anything: a flipped byte, a value
written into a cell, or the names of two same-shape entries swapped (Adam's two moments) is
a `CheckpointError` naming the entry; so is a digest without its entry or an entry without
its digest. A file without digests (written by another tool, or a version-1 file of this
library) still loads; `read` says it is unverified and `Context.load` warns.

Save initializes what is held but not yet initialized (so the file has every entry) and
writes atomically: a temporary file in the same directory, fsync, `os.replace`; any failure
or interruption (an exception, Ctrl-C) after the temporary file exists removes it and
leaves an old file at the path as it was. Load is strict (`tensor.holdings.match`): the
file must have exactly the held entries, each of the tensor's dims and the context's dtype,
or a `CheckpointError` names the offending entry and nothing is changed; loaded tensors
count as initialized, so loading before the first run is how a run resumes.

Input: a path and named arrays (`Context.save`). Output: the file, or its verified entries
(`Entries`). This module knows no Context.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import ArgumentError, CheckpointError, user_span
from ..records import record
from . import half, validate

FORMAT = "ocannl_ast"
VERSION = "2"
UNVERIFIED_VERSIONS = ("1",)  #: versions this library reads that have no digests
_SHOWN = 5  #: names listed in a message before "and N more"
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)


@record
class Entries:
    """A checkpoint file's entries, their digests verified when it had them."""

    arrays: dict[str, np.ndarray]
    verified: bool  #: False: no digests (a file from another tool, or of version 1)
    #: entry name -> its place by creation order ("p0", "p0/adam_m", "n0"); None: not recorded
    order: dict[str, str] | None
    bfloat16: frozenset[str] = frozenset()  #: entries stored as BF16 (read as float32)


def write(target: Path, arrays: dict[str, np.ndarray], precision: str,
          order: dict[str, str], bf16: frozenset[str] = frozenset()) -> None:
    """Write named arrays (logical values, each in its tensor's precision; those named in
    `bf16` stored as BF16) to `target`, atomically, with each entry's place by creation
    order (`holdings.order_keys`). `precision`: the context's, recorded."""
    from safetensors.numpy import save as to_bytes

    # one metadata key: safetensors writes several in hash order, this keeps files of
    # equal state byte-identical
    digests = {name: digest(name, arr) for name, arr in arrays.items()}
    info = json.dumps({"version": VERSION, "precision": precision, "digests": digests,
                       "order": order}, sort_keys=True)
    if bf16:  # exact bfloat16 values, stored as BF16 entries
        _atomic_write(target, half.bfloat16_safetensors(arrays, {FORMAT: info}, bf16))
    else:
        _atomic_write(target, to_bytes(arrays, metadata={FORMAT: info}))


def digest(name: str, arr: np.ndarray) -> str:
    """The hex sha256 of an entry's name, dtype, shape and raw (little-endian, C-order)
    bytes: the name makes two swapped same-shape entries mismatch."""
    little = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<"))
    h = hashlib.sha256(json.dumps([name, little.dtype.name, list(little.shape)]).encode())
    h.update(b"\0")
    h.update(little.reshape(-1).view(np.uint8).data)
    return h.hexdigest()


def path_arg(fn: str, path: Any) -> Path:
    """The `path` argument of `Context.save` / `Context.load` (`fn`), validated."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        validate.fail(ArgumentError, f"Context.{fn}: path must be a non-empty str or "
                                      f"os.PathLike, got {validate.describe(path)}")
    return Path(os.fspath(path))


def names(items: list[str]) -> str:
    """Names quoted for a message, the first few then "and N more"."""
    shown = ", ".join(f"'{n}'" for n in items[:_SHOWN])
    return shown + (f" and {len(items) - _SHOWN} more" if len(items) > _SHOWN else "")


def check_entry(source: Path, name: str, arr: np.ndarray, dims: tuple[int, ...],
                dtype: np.dtype[Any], what: str = "") -> None:
    """Entry `name` must have the tensor's `dims` and its dtype (`what`: how the
    message names the tensor, when it is not the entry's name)."""
    if arr.shape != dims:
        raise CheckpointError(f"checkpoint {source}: entry '{name}' has shape "
                              f"{tuple(arr.shape)}, {what or 'the tensor'} has dims {dims}",
                              user_span())
    if arr.dtype != dtype:
        raise CheckpointError(f"checkpoint {source}: entry '{name}' has dtype {arr.dtype}, "
                              f"{what or 'the tensor'} is stored as {dtype}", user_span())


def read(source: Path) -> Entries:
    """The entries of a safetensors file written by `save` (or any with matching names),
    their digests verified when it has them, and their order when it records one."""
    from safetensors import SafetensorError
    from safetensors.numpy import load as from_bytes

    try:
        data = source.read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {source}: {e.strerror or e}",
                              user_span()) from None
    bf16: frozenset[str] = frozenset()
    try:
        header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
        if isinstance(header, dict) and half.has_bfloat16(header):
            arrays, bf16 = half.read_safetensors(data, header)
        else:
            arrays = from_bytes(data)
    except (SafetensorError, ValueError, TypeError, OverflowError, KeyError) as e:  # damaged, foreign
        raise CheckpointError(f"{source} is not a readable safetensors checkpoint: "
                              f"{type(e).__name__}: {e}", user_span()) from None
    meta = _meta(source, (header.get("__metadata__") or {}).get(FORMAT))
    if meta is None:
        return Entries(arrays, False, None, bf16)
    _verify(source, arrays, meta["digests"])
    order = meta.get("order")
    if not (isinstance(order, dict) and order.keys() == arrays.keys()
            and all(isinstance(v, str) for v in order.values())
            and len(set(order.values())) == len(order)):
        order = None  # not recorded (or edited): by="order" is refused
    return Entries(arrays, True, order, bf16)


def _meta(source: Path, info: str | None) -> dict[str, Any] | None:
    """The file's `ocannl_ast` metadata, its digests checked for form; None when it has none
    to verify (a safetensors file from elsewhere, or a version-1 file). The version must be
    one this library reads, and a current-version file must carry its digests."""
    if info is None:
        return None
    try:
        meta = json.loads(info)
        version = meta.get("version")
    except (ValueError, AttributeError):
        meta, version = {}, info
    if version in UNVERIFIED_VERSIONS:
        return None
    if version != VERSION:
        raise CheckpointError(f"checkpoint {source} is of {FORMAT} checkpoint version "
                              f"{version!r}; this library reads version {VERSION!r}",
                              user_span())
    digests = meta.get("digests")
    if not isinstance(digests, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                for k, v in digests.items()):
        raise CheckpointError(f"checkpoint {source}: its {FORMAT} metadata has no valid "
                              "per-entry digests (the file is damaged or was edited)",
                              user_span())
    return meta  # type: ignore[no-any-return]


def _verify(source: Path, arrays: dict[str, np.ndarray], digests: dict[str, str]) -> None:
    """Every entry has its digest, every digest its entry, and each matches."""
    unlisted = sorted(arrays.keys() - digests.keys())
    if unlisted:
        raise CheckpointError(f"checkpoint {source}: entry {names(unlisted)} has no digest: "
                              "an entry was added or renamed after the file was written",
                              user_span())
    orphans = sorted(digests.keys() - arrays.keys())
    if orphans:
        raise CheckpointError(f"checkpoint {source} has a digest for the entry "
                              f"{names(orphans)} but no such entry: an entry was removed or "
                              "renamed after the file was written", user_span())
    bad = [name for name in sorted(arrays) if digest(name, arrays[name]) != digests[name]]
    if bad:
        raise CheckpointError(f"checkpoint {source}: entry {names(bad)} does not match its "
                              "digest: the file is damaged (a changed byte or value) or "
                              "entries were renamed or swapped", user_span())


def _atomic_write(target: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `target`, fsync it, rename it over `target`
    (a failure leaves any old file intact and no temporary file behind)."""
    folder = target.parent
    tmp: str | None = None  #: the temporary file to remove on the way out, if any
    try:
        fd, name = -1, ""
        while fd < 0:
            # named before it exists, so that an interruption right after the file is
            # created still finds it (with mkstemp the name would be lost with its frame)
            name = tmp = os.path.join(folder, f".{target.name}.{secrets.token_hex(16)}.tmp")
            try:
                fd = os.open(name, _TMP_FLAGS, 0o600)
            except FileExistsError:
                tmp = None  # not ours (128 random bits: never in practice): another name
        with _closing_fd(fd) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(name, target)
        tmp = None  # renamed: nothing to remove
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {target}: {e.strerror or e}",
                              user_span()) from None
    finally:  # any failure or interruption (KeyboardInterrupt too) removes the temp file
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _fsync_dir(folder)


@contextlib.contextmanager
def _closing_fd(fd: int) -> Iterator[BinaryIO]:
    """`fd` as a binary file, closed on exit even when wrapping it fails."""
    try:
        f = os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise
    with f:
        yield f


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (best effort: some file systems refuse a directory fsync)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
