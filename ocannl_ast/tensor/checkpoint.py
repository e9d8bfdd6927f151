"""Checkpoints: `ctx.save(path)` / `ctx.load(path)` as safetensors files (no pickle).

What a context *holds*: every parameter and every persistent node (optimizer state such as
Adam's moments and bias corrections, SGD momentum, a user's @cd `{x}` nodes) that a
routine compiled in it (`ctx.compile`, `ctx.eval`, `oc.eval`...) reads or writes. Each is
an entry keyed by its unique `tensor.name` ("mlp.linear.w", "mlp.linear.w/adam_m"), its
logical (unpadded) value in the context's precision; one metadata key, "ocannl_ast",
records the format version and the precision (one key, so that equal states give
byte-identical files).

Save initializes what is held but not yet initialized (so the file has every entry) and
writes atomically: a temporary file in the same directory, fsync, `os.replace`. Load is
strict: the file must have exactly the held names, each of the tensor's dims and the
context's dtype, or a `CheckpointError` names the offending entry and nothing is changed;
loaded tensors count as initialized, so loading before the first run is how a run resumes.

Input: a path and named arrays (`Context.save`) or the names and dims a context expects
(`Context.load`). Output: the file, or its checked arrays. This module knows no Context.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArgumentError, CheckpointError, user_span
from . import validate
from .node import Init, Tensor

FORMAT = "ocannl_ast"
VERSION = "1"
_SHOWN = 5  #: names listed in a message before "and N more"


def held(tensors: Iterable[Tensor]) -> list[Tensor]:
    """The checkpointed tensors among these: params and persistent nodes (not the 128-bit
    word tensors of the random initializer)."""
    return [t for t in tensors if t.init in (Init.PARAM, Init.NODE) and not t.uint4x32]


def write(target: Path, arrays: dict[str, np.ndarray], precision: str) -> None:
    """Write named arrays (logical values, in the context's `precision`) to `target`,
    atomically."""
    from safetensors.numpy import save as to_bytes

    # one metadata key: safetensors writes several in hash order, this keeps files of
    # equal state byte-identical
    info = json.dumps({"version": VERSION, "precision": precision}, sort_keys=True)
    _atomic_write(target, to_bytes(arrays, metadata={FORMAT: info}))


def check(source: Path, arrays: dict[str, np.ndarray], dims: dict[str, tuple[int, ...]],
          dtype: np.dtype[Any]) -> None:
    """The file's entries must be exactly the held names (`dims`' keys), each of its
    tensor's dims and the context's dtype (strict: see the module doc)."""
    _check_names(source, dims.keys(), arrays.keys())
    for name, d in sorted(dims.items()):
        _check_entry(source, name, arrays[name], d, dtype)


def path_arg(fn: str, path: Any) -> Path:
    """The `path` argument of `Context.save` / `Context.load` (`fn`), validated."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        validate.fail(ArgumentError, f"Context.{fn}: path must be a non-empty str or "
                                      f"os.PathLike, got {validate.describe(path)}")
    return Path(os.fspath(path))


def _names(names: list[str]) -> str:
    shown = ", ".join(f"'{n}'" for n in names[:_SHOWN])
    return shown + (f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def _check_names(source: Path, held_names: Iterable[str], file_names: Iterable[str]) -> None:
    want, have = set(held_names), set(file_names)
    missing, extra = sorted(want - have), sorted(have - want)
    if missing:
        raise CheckpointError(f"checkpoint {source} is missing the entry {_names(missing)} "
                              "that this context holds", user_span())
    if extra:
        raise CheckpointError(f"checkpoint {source} has the extra entry {_names(extra)}, "
                              "which this context does not hold (compile the routines that "
                              "use it before loading)", user_span())


def _check_entry(source: Path, name: str, arr: np.ndarray, dims: tuple[int, ...],
                 dtype: np.dtype[Any]) -> None:
    if arr.shape != dims:
        raise CheckpointError(f"checkpoint {source}: entry '{name}' has shape "
                              f"{tuple(arr.shape)}, the tensor has dims {dims}", user_span())
    if arr.dtype != dtype:
        raise CheckpointError(f"checkpoint {source}: entry '{name}' has dtype {arr.dtype}, "
                              f"the context's precision is {dtype}", user_span())


def read(source: Path) -> dict[str, np.ndarray]:
    """The entries of a safetensors file written by `save` (or any with matching names)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load as from_bytes

    try:
        data = source.read_bytes()
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {source}: {e.strerror or e}",
                              user_span()) from None
    try:
        arrays = from_bytes(data)
        header = json.loads(data[8:8 + int.from_bytes(data[:8], "little")])
    except (SafetensorError, ValueError, TypeError, OverflowError) as e:  # damaged, foreign
        raise CheckpointError(f"{source} is not a readable safetensors checkpoint: "
                              f"{type(e).__name__}: {e}", user_span()) from None
    _check_version(source, (header.get("__metadata__") or {}).get(FORMAT))
    return arrays


def _check_version(source: Path, info: str | None) -> None:
    """The file's `ocannl_ast` metadata, when it has one, must be of this version (a
    safetensors file from elsewhere has none: its names and shapes decide)."""
    if info is None:
        return
    try:
        version = json.loads(info).get("version")
    except (ValueError, AttributeError):
        version = info
    if version != VERSION:
        raise CheckpointError(f"checkpoint {source} is of {FORMAT} checkpoint version "
                              f"{version!r}; this library reads version {VERSION!r}",
                              user_span())


def _atomic_write(target: Path, data: bytes) -> None:
    """Write `data` to a temporary file beside `target`, fsync it, rename it over `target`
    (a failure leaves any old file intact and no temporary file behind)."""
    folder = target.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise CheckpointError(f"cannot write checkpoint {target}: {e.strerror or e}",
                              user_span()) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise CheckpointError(f"cannot write checkpoint {target}: {e.strerror or e}",
                                  user_span()) from None
        raise
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable (best effort: some file systems refuse a directory fsync)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
