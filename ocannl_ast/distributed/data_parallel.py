"""The data-parallel step: a grad routine (forward + backprop on this rank's data), one
in-place mean all-reduce of every gradient laid out in one contiguous arena (params in
sorted-name order), then the update routine, identical on every rank. Ranks agree on a
digest of the compiled programs at compile time and on the params periodically.
Input: a context, a scalar loss, update code. Output: a callable step."""

from __future__ import annotations

import hashlib
import time
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import ArgumentError, DistributedError, user_span
from ..lowering.digest import program_digest
from ..lowering.loop_ir import Buffer, Precision
from ..tensor import validate
from ..tensor.context import Context, as_code
from ..tensor.node import Tensor, buffer_id
from ..tensor.rank_streams import offsets_in
from ..tensor.routine import Routine
from ..tensor.train import grad_update
from .world import World, current

#: the data-parallel step of each context (for `ocd.save` / `ocd.load`)
steps: weakref.WeakKeyDictionary[Context, DataParallelStep] = weakref.WeakKeyDictionary()


@dataclass
class Timings:
    """Seconds spent per part of the steps so far (`profile=True` separates waiting for the
    slowest rank, a barrier, from the all-reduce itself)."""

    compute: float = 0.0  #: grad and update routines
    wait: float = 0.0  #: waiting for the slowest rank (profile only)
    allreduce: float = 0.0  #: the gradient all-reduce (with the wait unless profiled)
    steps: int = 0
    per_step: list[tuple[float, float, float]] = field(default_factory=list)


class DataParallelStep:
    """``step(**statics)``: one data-parallel training step (see the module docstring).

    Attributes: ``global_step`` (steps taken, restored by `ocd.load`), ``samples`` (global
    samples seen, when `batch_size` was given), ``grad_routine``, ``update_routine``,
    ``params`` (sorted by name), ``arena`` (every gradient, contiguous), ``timings``,
    ``reduce_path`` ("nccl": on the GPUs, one device allocation; else "host (...)"),
    ``rank_streams`` (how many random draws of the grad routine, e.g. dropout masks, are
    keyed by this rank: `tensor.rank_streams`).
    """

    def __init__(self, ctx: Context, loss: Tensor, update: Any, world: World, *,
                 check_every: int, batch_size: int | None, seed: int, profile: bool,
                 nccl: bool | None = None) -> None:
        self.ctx, self.loss, self.world = ctx, loss, world
        self.check_every, self.batch_size, self.seed = check_every, batch_size, seed
        self.profile = profile
        self.params = sorted(loss.params(), key=lambda p: p.name)
        names = [p.name for p in self.params]
        if len(set(names)) != len(names):
            raise DistributedError(f"param names are not unique: {names}", user_span())
        self.grad_routine = ctx.compile(grad_update(loss),
                                        keep=[loss, *(p.grad for p in self.params)])
        self.update_routine = ctx.compile(as_code(update))
        ctx.ensure_initialized(self.params)  # deterministic: seed + name, alike on every rank
        self.global_step = 0
        self.samples = 0
        self.timings = Timings()
        self._bufs = [p.grad.buffer(ctx.layout) for p in self.params]
        rewritten = [p.name for p, b in zip(self.params, self._bufs, strict=True)
                     if b.id in self.update_routine.writes]
        if rewritten:  # it would overwrite the averaged gradients with this rank's own
            raise ArgumentError(
                f"data_parallel: the update code writes the gradients of {rewritten[:3]}: "
                "pass only the update (e.g. oc.sgd_update(loss, ...)), not "
                "oc.grad_update(loss) — data_parallel computes the gradients itself",
                user_span())
        self.arena = self._lay_out_arena()
        self._agree_on_code()
        self.rank_streams = self._key_draws_by_rank()
        self._checked_params_at = -1
        self._device: Any = None  #: nccl.DeviceArena when the reduction stays on the GPU
        self.reduce_path = "host"  #: "nccl", or "host" (and why, where NCCL was wanted)
        if ctx.backend.name == "cuda" and (nccl or (nccl is None and world.size > 1)):
            from .nccl import open_device_arena

            self._device, self.reduce_path = open_device_arena(
                world, self.arena, self._views, required=bool(nccl))

    # ---- set-up ------------------------------------------------------------------------

    def _lay_out_arena(self) -> np.ndarray:
        """One contiguous array holding every gradient; the context's grad arrays become
        views into it, so one in-place all-reduce covers them all."""
        ctx = self.ctx
        self._views: list[np.ndarray] = []
        with ctx.lock:
            total = sum(int(np.prod(b.dims)) for b in self._bufs)
            arena = np.zeros(total, dtype=ctx.dtype)
            offset = 0
            for b in self._bufs:
                n = int(np.prod(b.dims))
                view = arena[offset:offset + n].reshape(b.dims)
                old = ctx.arrays.get(b.id)
                if old is not None and old.shape == b.dims:
                    view[...] = old
                ctx.arrays[b.id] = view
                self._views.append(view)
                offset += n
            ctx.arrays_epoch += 1  # routines re-bind: they now write into the arena
            return arena

    def _key_draws_by_rank(self) -> int:
        """Random draws per cell (dropout masks) in the grad routine get this rank's share of
        the counters: each offset constant it reads becomes rank * cells (`rank_streams`).
        The update runs alike on every rank, so it may not draw from one. Returns how many
        draws are keyed."""
        upd = self.update_routine
        drawn = [o for o, _ in offsets_in(*upd.code.tensors()) if buffer_id(o) in upd.needs]
        if drawn:
            raise ArgumentError(
                "data_parallel: the update code draws random numbers keyed by rank (e.g. a "
                "dropout layer in training mode); the update must be identical on every "
                "rank: compute the update from the gradients only", user_span())
        limit = 1 << (53 if self.ctx.precision.compute is Precision.FLOAT64 else 24)
        keyed = 0
        for offset, shaped in offsets_in(self.loss):
            if buffer_id(offset) not in self.grad_routine.needs:
                continue
            cells = int(np.prod(shaped.dims()))
            if cells * self.world.size > limit:
                raise ArgumentError(
                    f"data_parallel: a random draw over '{shaped.label}' ({cells} cells per "
                    f"rank, {cells * self.world.size} over {self.world.size} ranks) has more "
                    f"cells than the {limit} counters exact in {self.ctx.precision.value}",
                    user_span())
            self.ctx.set(offset, np.array([float(self.world.rank * cells)]))
            keyed += 1
        return keyed

    def _agree_on_code(self) -> None:
        """Every rank compiled the same programs with the same flags and arena layout."""
        mine = {
            "backend": f"{self.ctx.backend.name}/{self.ctx.precision.value}",
            "grad routine": _routine_id(self.grad_routine),
            "update routine": _routine_id(self.update_routine),
            "gradient arena": _digest(repr([(p.name, b.dims) for p, b
                                            in zip(self.params, self._bufs, strict=True)])),
        }
        _compare(self.world.allgather(mine, "the compile-time agreement check"),
                 "compiled code differs across ranks ({what}: {detail}); every rank must "
                 "build the same graph, flags and precision")

    # ---- running -----------------------------------------------------------------------

    def __call__(self, **statics: int) -> None:
        grad_kw, update_kw = self._split(statics)
        t0 = time.perf_counter()
        self.grad_routine(**grad_kw)
        t1 = time.perf_counter()
        if self.global_step == 0 and self._checked_params_at < 0:
            self.check_params()  # initialized from the same seed on every rank?
            t1 = time.perf_counter()
        waited = self._reduce()
        t2 = time.perf_counter()
        self.update_routine(**update_kw)
        t3 = time.perf_counter()
        self.global_step += 1
        if self.batch_size is not None:
            self.samples += self.batch_size * self.world.size
        self._record(t1 - t0 + t3 - t2, waited, t2 - t1 - waited)
        if self.check_every and self.global_step % self.check_every == 0:
            self.check_params()

    def _split(self, statics: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
        g, u = self.grad_routine.static_names, self.update_routine.static_names
        extra = sorted(set(statics) - set(g) - set(u))
        if extra:
            validate.fail(ArgumentError, f"data-parallel step takes static arguments "
                                         f"{sorted(set(g) | set(u))}, got unknown {extra}")
        return ({k: v for k, v in statics.items() if k in g},
                {k: v for k, v in statics.items() if k in u})

    def _reduce(self) -> float:
        """Average the gradients over the ranks; the seconds spent waiting (profiled)."""
        world, backend = self.world, self.ctx.backend
        if world.size == 1 and self._device is None:
            return 0.0
        with self.ctx.lock:
            for b, view in zip(self._bufs, self._views, strict=True):
                if self.ctx.arrays.get(b.id) is not view:
                    raise DistributedError(f"the gradient array of '{b.name}' was replaced "
                                           "after data_parallel laid out its arena", user_span())
            waited = 0.0
            if self.profile:
                t = time.perf_counter()
                world.barrier("waiting for the slowest rank")
                waited = time.perf_counter() - t
            if self._device is not None:  # ncclAllReduce on the stream: no host copy
                self._device.reduce_mean()
                return waited
            for view in self._views:
                backend.to_host(view)
            world.allreduce_mean_(self.arena)
            for view in self._views:
                backend.host_written(view)
            self.ctx.fast = None
        return waited

    def _record(self, compute: float, wait: float, reduce: float) -> None:
        t = self.timings
        t.compute += compute
        t.wait += wait
        t.allreduce += reduce
        t.steps += 1
        if self.profile:
            t.per_step.append((compute, wait, reduce))

    def check_params(self) -> None:
        """DistributedError (on every rank) unless every param has the same bytes on every
        rank: names the first params that differ and the ranks that differ from rank 0."""
        self._checked_params_at = self.global_step
        mine = {p.name: _digest(self.ctx.get(p).tobytes()) for p in self.params}
        _compare(self.world.allgather(mine, "the param agreement check"),
                 f"params differ across ranks at global step {self.global_step} "
                 "({what}: {detail}); seed every rank alike and keep the update identical")


def _routine_id(r: Routine) -> str:
    """A routine's content-derived name (its digest), or its given name and digest."""
    return r.name if r.content_named else f"{r.name}:{program_digest(r.prog)}"


def _digest(data: str | bytes) -> str:
    raw = data.encode() if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:16]


def _compare(gathered: list[dict[str, str]], message: str) -> None:
    """Raise on every rank (each holds every rank's dict) at the first key that differs."""
    ref = gathered[0]
    for what in list(ref) + sorted(set().union(*gathered) - set(ref)):
        values = [g.get(what) for g in gathered]
        odd = [r for r, v in enumerate(values) if v != ref.get(what)]
        if odd:
            detail = (f"rank(s) {odd} differ from rank 0: " +
                      ", ".join(f"rank {r}: {values[r]}" for r in [0, *odd[:3]]))
            raise DistributedError(message.format(what=what, detail=detail), user_span())


def data_parallel(ctx: Context, loss: Tensor, update: Any, *, world: World | None = None,
                  check_every: int = 100, batch_size: int | None = None, seed: int = 0,
                  profile: bool = False, nccl: bool | None = None) -> DataParallelStep:
    """A data-parallel training step over every rank of `world` (default: `ocd.init()`).

    Each rank runs forward + backprop on its own data, the gradients are averaged over the
    ranks in place (one all-reduce), and `update` (e.g. ``oc.adam_update(loss, ...)``) runs
    identically everywhere, so params stay bit-identical. Ranks check that they compiled the
    same programs now, and that their params agree at the first step and every
    `check_every` steps (0: never). `batch_size` (this rank's) counts global samples for
    checkpoints; `seed` is the data-order seed `ocd.save` records. `nccl`: on a CUDA context,
    None averages the gradients on the GPUs with NCCL when libnccl loads on every rank (else
    through host copies), True requires NCCL (even in a world of one), False never uses it.

    Example: ``step = ocd.data_parallel(ctx, loss, oc.sgd_update(loss, learning_rate=0.1))``
    then ``step(batch=b)``.
    """
    if not isinstance(ctx, Context):
        validate.fail(ArgumentError, f"data_parallel: ctx must be an oc.Context, got "
                                     f"{validate.describe(ctx)}")
    validate.check_tensor("data_parallel", "loss", loss)
    for name, v in (("check_every", check_every), ("seed", seed)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            validate.fail(ArgumentError, f"data_parallel: {name} must be a non-negative int, "
                                         f"got {validate.describe(v)}")
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, int) or batch_size <= 0):
        validate.fail(ArgumentError, f"data_parallel: batch_size must be a positive int, got "
                                     f"{validate.describe(batch_size)}")
    if nccl is not None and not isinstance(nccl, bool):
        validate.fail(ArgumentError, f"data_parallel: nccl must be True, False or None, got "
                                     f"{validate.describe(nccl)}")
    if nccl and ctx.backend.name != "cuda":
        validate.fail(ArgumentError, f"data_parallel(nccl=True) needs a CUDA context "
                                     f"(oc.Context(backend='cuda')), got {ctx.backend.name!r}")
    if not loss.params():
        validate.fail(ArgumentError, f"data_parallel: loss '{loss.label}' has no params")
    if ctx.precision.is_half:  # the all-reduce sums float32 / float64 arrays
        validate.fail(ArgumentError, f"data_parallel: a {ctx.precision.value} context cannot "
                                     "be data-parallel: use float32 or float64")
    own = [(p.name, p.precision) for p in loss.params()
           if p.precision is not None and p.precision is not ctx.precision]
    if own:  # the all-reduce sums arrays of the context's dtype
        validate.fail(ArgumentError, f"data_parallel: param '{own[0][0]}' is stored in "
                                     f"{own[0][1].value}, the context in "
                                     f"{ctx.precision.value}: a data-parallel step needs every "
                                     "param in the context's precision")
    if ctx in steps:  # its arena would replace the first one's gradient arrays
        validate.fail(ArgumentError, "data_parallel: this context already has a data-parallel "
                                     "step (one per context): use another oc.Context")
    step = DataParallelStep(ctx, loss, update, world or current(), check_every=check_every,
                            batch_size=batch_size, seed=seed, profile=profile, nccl=nccl)
    steps[ctx] = step
    return step


def grad_buffers(step: DataParallelStep) -> list[Buffer]:
    """The gradient buffers in arena order (for tests and tools)."""
    return list(step._bufs)

