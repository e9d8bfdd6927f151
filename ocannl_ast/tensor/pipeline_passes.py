"""The scheduling stages of the compile pipeline (`pipeline.STAGES`): loop-IR passes that
reorder or merge loop nests without changing any cell's arithmetic (same bits), each
returning what it decided as a `pipeline.Decided`.

- `unroll_loops` (before `inline`): reductions of a few terms per cell become straight-line
  code (`lowering.schedule.unroll_reductions`), so the cells around them vectorize;
- `interchange_loops`: unit-stride loops innermost (`lowering.schedule.interchange`);
- `fuse_loops`: adjacent pointwise nests over the same iteration space merge
  (`lowering.fuse_nests`), then nests sharing outer loops merge under them, row by row
  (`lowering.fuse_rows`);
- `parallel_loops`: outer loops of independent nests with enough work run on OpenMP threads
  when `OCANNL_AST_THREADS` asks for more than one (`lowering.parallel`).

- `share_storage`: intermediates that never leave one loop body become scalar locals
  (`lowering.scalarize`), then those whose lifetimes do not overlap share arenas
  (`lowering.arena`); both are reported as virtual (no value after a run).

All five are skipped with ``OCANNL_AST_SCHEDULE=0`` or ``Options.schedule=False``, and
for a backend without contraction kernels (CUDA: see `scheduling`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from .. import config
from ..infer.padding import Margins
from ..lowering.loop_ir import CONTRACTION_MIN_WORK, LoopProgram
from ..records import record


@record
class Decided:
    """A loop-IR pass's output program and the buffer ids it took out of the routine."""

    prog: LoopProgram
    virtual: frozenset[int] = frozenset()  #: computed inline where they are read
    folded: frozenset[int] = frozenset()  #: constants read as numbers


class _NoEntries(Mapping[Any, Any]):
    """An empty read-only mapping that hashes (a record field's default must): the default
    of `pipeline.Options`' and `pipeline.Lowered`'s mapping fields, shared by all."""

    def __getitem__(self, key: Any) -> Any:
        raise KeyError(key)

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __hash__(self) -> int:
        return 0


NO_ENTRIES: Mapping[Any, Any] = _NoEntries()


class Options(Protocol):
    """What these stages read of `pipeline.Options`."""

    @property
    def schedule(self) -> bool | None: ...
    @property
    def threads(self) -> int | None: ...
    @property
    def keep(self) -> frozenset[int]: ...
    @property
    def layout(self) -> Mapping[int, Margins]: ...
    @property
    def fusion_limit(self) -> int: ...
    @property
    def virtualize(self) -> bool | None: ...


def virtualizing(opts: Options) -> bool:
    """Whether to virtualize: the option, else OCANNL_AST_VIRTUALIZE (on unless "0")."""
    return opts.virtualize if opts.virtualize is not None else config.virtualize()


def scheduling(opts: Options) -> bool:
    """Whether to run the scheduling passes: the option, else OCANNL_AST_SCHEDULE for a CPU
    backend (one with contraction kernels: its `fusion_limit` is below the default). A GPU
    backend (CUDA) maps each nest's cells to threads itself: merged nests, arenas and
    unrolled reductions would take that parallelism away."""
    if opts.schedule is not None:
        return opts.schedule
    return config.schedule() and opts.fusion_limit < CONTRACTION_MIN_WORK


def _decided(prog: LoopProgram) -> Decided:
    return Decided(prog)


def unroll_loops(prog: LoopProgram, opts: Options) -> Decided:
    """Unroll small non-contraction reductions (`lowering.schedule.unroll_reductions`)."""
    if not scheduling(opts):
        return _decided(prog)
    from ..lowering.schedule import unroll_reductions

    return _decided(unroll_reductions(prog).prog)


def interchange_loops(prog: LoopProgram, opts: Options) -> Decided:
    """Unit-stride loops innermost in independent nests (`lowering.schedule.interchange`)."""
    if not scheduling(opts):
        return _decided(prog)
    from ..lowering.schedule import interchange

    return _decided(interchange(prog).prog)


def fuse_loops(prog: LoopProgram, opts: Options) -> Decided:
    """Merge adjacent pointwise nests over the same extents (`lowering.fuse_nests`), then
    (CPU backends) row-wise nests (`lowering.fuse_rows`)."""
    from ..lowering.fuse_nests import fuse_nests

    if not scheduling(opts):
        # a GPU backend (no other scheduling pass) still merges pointwise nests: every cell
        # stays a thread of its own (the same parallelism), one kernel launch for several
        gpu = opts.schedule is None and config.schedule() and \
            opts.fusion_limit >= CONTRACTION_MIN_WORK
        return _decided(fuse_nests(prog).prog if gpu else prog)
    from ..lowering.fuse_rows import fuse_rows
    from ..lowering.parallel import thread_count

    # Row-wise fusion only where the rows run on threads (one worksharing loop, one barrier,
    # for the merged nests). At one thread it does not pay: a row's reduction then its
    # pointwise pass is one latency chain per row (a softmax row of 32: 110 us fused
    # against 81 us as two passes over all rows; 1.3 ms against 1.8 ms at 4 MB).
    fused = fuse_nests(prog).prog
    n = opts.threads if opts.threads is not None else thread_count()
    return _decided(fuse_rows(fused).prog if n > 1 else fused)


def parallel_loops(prog: LoopProgram, opts: Options) -> Decided:
    """Mark the outer loops that run on threads (`lowering.parallel`), when
    `opts.threads` (else OCANNL_AST_THREADS) is more than one."""
    if not scheduling(opts):
        return _decided(prog)
    from ..lowering.parallel import mark_parallel, thread_count

    n = opts.threads if opts.threads is not None else thread_count()
    return _decided(mark_parallel(prog, n).prog) if n > 1 else _decided(prog)


def share_storage(prog: LoopProgram, opts: Options) -> Decided:
    """Intermediates living within one loop body become locals (`lowering.scalarize`, when
    virtualizing), the others share arenas by liveness (`lowering.arena`); the buffers in `opts.keep` and
    those laid out with margins before keep their own storage."""
    if not scheduling(opts):
        return _decided(prog)
    from ..lowering.arena import share_storage as share
    from ..lowering.scalarize import Scalarized, scalarize

    padded = frozenset(b for b, m in opts.layout.items() if m)
    local = scalarize(prog, opts.keep, padded) if virtualizing(opts) else Scalarized(prog,
                                                                                  frozenset())
    out = share(local.prog, opts.keep, padded)
    return Decided(out.prog, virtual=local.buffers | out.shared)
