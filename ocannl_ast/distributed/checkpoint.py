"""Data-parallel checkpoints: rank 0 writes the context's checkpoint (`ctx.save`, atomic)
and a sidecar `<path>.dist.json` (world size, global step, global samples seen, data-order
seed, the checkpoint's digest), then every rank passes a barrier; every rank loads. Input:
a context with a data-parallel step. Output: files; `Resume` on load."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, CheckpointError, DistributedError, OcannlError, user_span
from ..tensor.context import Context
from .data_parallel import DataParallelStep, steps
from .world import World

SIDECAR = ".dist.json"


@dataclass(frozen=True, slots=True)
class Resume:
    """What `ocd.load` restored besides the tensors."""

    world_size: int  #: ranks of the run that saved
    global_step: int  #: data-parallel steps taken before the save
    samples: int | None  #: global samples seen (None when the step had no batch_size)
    seed: int  #: the data-order seed

    def next_step(self, global_batch: int) -> int:
        """The global step to resume at with `global_batch` samples per global step (any
        world size): the first sample not yet seen, in units of global batches."""
        seen = self.samples if self.samples is not None else self.global_step * global_batch
        if isinstance(global_batch, bool) or not isinstance(global_batch, int) \
                or global_batch <= 0:
            raise ArgumentError(f"Resume.next_step: global_batch must be a positive int, got "
                                f"{global_batch!r}", user_span())
        if seen % global_batch:
            raise ArgumentError(f"{seen} samples were seen, not a multiple of the global "
                                f"batch {global_batch}: pick a global batch that divides it",
                                user_span())
        return seen // global_batch


def _step_of(ctx: Context, fn: str) -> DataParallelStep:
    step = steps.get(ctx)
    if step is None:
        raise DistributedError(f"ocd.{fn}: this context has no data-parallel step: call "
                               "ocd.data_parallel(ctx, loss, update) first", user_span())
    return step


def _outcome(world: World, error: str | None, what: str) -> None:
    """Every rank learns whether any rank failed (no rank is left waiting), and raises."""
    errors = world.allgather(error, what)
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        r, e = bad[0]
        raise CheckpointError(f"{what} failed on rank(s) {[r for r, _ in bad]}: rank {r}: {e}",
                              user_span())


def save(ctx: Context, path: str | os.PathLike[str], *, seed: int | None = None) -> None:
    """Rank 0 writes the checkpoint atomically, then every rank waits at a barrier.

    Example: ``ocd.save(ctx, "run.safetensors")``; resume with ``ocd.load(ctx, ...)``.
    """
    step = _step_of(ctx, "save")
    world = step.world
    error = None
    if world.rank == 0:
        try:
            ctx.save(path)
            meta = {"world_size": world.size, "global_step": step.global_step,
                    "samples": step.samples if step.batch_size is not None else None,
                    "seed": step.seed if seed is None else seed,
                    "checkpoint_sha256": _file_digest(Path(path))}
            _atomic_text(Path(str(path) + SIDECAR), json.dumps(meta, sort_keys=True))
        except (OcannlError, OSError) as e:
            error = str(e)
    _outcome(world, error, f"saving checkpoint {path}")
    world.barrier("the barrier after saving a checkpoint")


def load(ctx: Context, path: str | os.PathLike[str]) -> Resume:
    """Every rank loads the checkpoint (and its sidecar) into `ctx` and its data-parallel
    step (global step, samples); the ranks then check that their params agree."""
    step = _step_of(ctx, "load")
    error, meta = None, None
    try:
        meta = _read_meta(Path(path))
        ctx.load(path)
    except (OcannlError, OSError, ValueError) as e:
        error = str(e)
    _outcome(step.world, error, f"loading checkpoint {path}")
    assert meta is not None
    step.global_step = int(meta["global_step"])
    if meta.get("samples") is not None:
        step.samples = int(meta["samples"])
    step.check_params()
    return Resume(int(meta["world_size"]), step.global_step, meta.get("samples"),
                  int(meta["seed"]))


def _read_meta(path: Path) -> dict[str, Any]:
    side = Path(str(path) + SIDECAR)
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read {side} (written by ocd.save beside the "
                              f"checkpoint): {e}") from None
    if meta.get("checkpoint_sha256") != _file_digest(path):
        raise CheckpointError(f"{side} does not describe {path} (its digest differs): the "
                              "checkpoint was replaced after ocd.save wrote them")
    return dict(meta)


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {path}: {e.strerror or e}") from None


def _atomic_text(target: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise



