"""Storage sharing by liveness (OCANNL's pool allocator, per routine): intermediates whose
lifetimes within the routine do not overlap live at different times in the same memory.

A buffer is shared when the routine owns it: not kept (params, grads, optimizer state, data,
anything the caller holds or another routine reads), not padded, not uint4x32, of at least
`MIN_ELEMS` cells, and fully written by the first unit that touches it without that unit
reading it (so no value survives from an earlier run). Its lifetime runs from that unit to
the last one touching it. Shared buffers are placed in a few arena buffers at offsets such
that two buffers overlapping in memory never have overlapping lifetimes, and two buffers one
unit touches are never in the same arena (the backends keep seeing distinct arrays in each
nest: contraction kernels, `restrict`, vectorization). Reads and writes of a shared buffer
become flat reads and writes of its arena at its offset.

Stage: the last loop-IR pass before `bind_statics` (`pipeline_passes.share_storage`). Input:
a `LoopProgram`, the buffer ids kept, the padded buffer ids. Output: the program over the
arenas instead of the shared buffers, and the sizes (`Shared`).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence

from ..records import record
from .loop_ir import (
    Buffer,
    Const,
    Expr,
    Fill,
    ForLoop,
    Get,
    IndexExpr,
    LoopProgram,
    SetCell,
    SetFromVec,
    Stmt,
    Symbol,
)
from .nests import body_units, buffer_accesses, flat_terms, noted
from .schedule import cell_injective, same_cell
from .walk import map_stmt, stmt_nodes

#: buffers smaller than this many cells keep their own storage (scalars, tiny vectors)
MIN_ELEMS = 64
#: offsets are multiples of this many cells (64 bytes in float32)
ALIGN = 16
#: arenas at most per routine
MAX_ARENAS = 6
#: arena ids encode their start and size (`arena_id`): sizes stay below this many cells
_SPAN = 1 << 40
#: the id under which a context holds the scratch block of its routines' arenas
SCRATCH_ID = -1


@record
class Shared:
    """The program after sharing, and what was decided."""

    prog: LoopProgram
    shared: frozenset[int]  #: ids of the buffers now stored in an arena
    separate_cells: int  #: the cells those buffers took, each on its own
    arena_cells: int  #: the cells of the arenas holding them
    peak_live_cells: int  #: most cells of shared buffers live during one unit


def share_storage(prog: LoopProgram, keep: frozenset[int], padded: frozenset[int],
                  min_elems: int | None = None) -> Shared:
    """Share storage between the routine-owned intermediates of `prog` by liveness.

    Example: ``share_storage(prog, frozenset({w.id}), frozenset()).arena_cells``.
    """
    min_elems = MIN_ELEMS if min_elems is None else min_elems
    notes, us = body_units(prog)
    touch = [buffer_accesses(u).keys() for u in us]  # the buffer ids each unit touches
    life: dict[int, list[int]] = {}  # buffer id -> [first unit, last unit]
    for k, t in enumerate(touch):
        for b in t:
            life.setdefault(b, [k, k])[1] = k
    vec_written = {x.buffer.id for u in us for x in stmt_nodes(u) if isinstance(x, SetFromVec)}
    cands = [b for b in prog.buffers if b.id in life and b.id not in keep
             and b.id not in padded and b.id not in vec_written and not b.uint4x32
             and b.precision is None and math.prod(b.dims) >= min_elems
             and full_write(us[life[b.id][0]], b)]
    if not cands:
        return Shared(prog, frozenset(), 0, 0, 0)
    place, sizes = _place(cands, life, touch)
    if not place:
        return Shared(prog, frozenset(), 0, 0, 0)
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    arenas = [Buffer(arena_id(at, n), f"arena{k}", (n,))
              for k, (at, n) in enumerate(zip(starts, sizes, strict=True))]
    out = _rewrite(us, place, arenas, prog, touch)
    shared = frozenset(place)
    by_id = {b.id: b for b in prog.buffers}
    sep = sum(math.prod(by_id[b].dims) for b in shared)
    peak = _peak({b: math.prod(by_id[b].dims) for b in shared}, life, len(us))
    note = (f"arena: {len(shared)} buffers ({sep} cells) share {len(arenas)} arenas of "
            f"{sum(sizes)} cells (at most {peak} live at once)")
    more = [note]
    body = noted(prog, notes, more, out, shared)
    body = LoopProgram(body.name, (*body.buffers, *arenas), body.static_args, body.body,
                       body.precision)
    return Shared(body, shared, sep, sum(sizes), peak)


def arena_id(start: int, cells: int) -> int:
    """The buffer id of an arena of `cells` cells at cell `start` of its routine's scratch
    (its arenas one after another): negative, no tensor has it. A context stores every
    routine's scratch in one block (`scratch_span`): a routine's arenas never overlap, two
    routines' may (their contents never outlive a run, and routines run one at a time)."""
    return -(2 + start * _SPAN + cells)


def scratch_span(buf_id: int) -> tuple[int, int] | None:
    """(start, cells) of the arena with this buffer id (`arena_id`); None for a buffer
    that is not an arena. Example: ``scratch_span(arena_id(64, 32))`` is ``(64, 32)``."""
    if buf_id > -2:
        return None
    return divmod(-buf_id - 2, _SPAN)


def full_write(u: Stmt, b: Buffer) -> bool:
    """Whether unit `u` writes every cell of `b` (once) before any read of it: the first
    statement touching `b` writes it without reading it, injectively over as many
    iterations as `b` has cells, and every other access is at the written cell."""
    first: SetCell | None = None
    for s, loops, reads, _ in buffer_accesses(u).get(b.id, ()):
        if first is None:
            if isinstance(s, Fill) and s.buffer.id == b.id:
                return True
            if reads:
                return False
            if isinstance(s, SetCell) and s.buffer.id == b.id:
                if math.prod(n for _, n in loops) != math.prod(b.dims) or \
                        not cell_injective(loops, s):
                    return False
                first = s
            continue
        if isinstance(s, Fill) and s.buffer.id == b.id:
            return False
        if isinstance(s, SetCell) and s.buffer.id == b.id and \
                not same_cell(b, first.index, s.index):
            return False
        if not all(same_cell(b, first.index, ix) for ix in reads):
            return False
    return first is not None


def _place(cands: Sequence[Buffer], life: dict[int, list[int]],
           touch: Sequence[Collection[int]]) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """buffer id -> (arena, offset) for each buffer placed, and each arena's cells."""
    co: dict[int, set[int]] = {b.id: set() for b in cands}
    for t in touch:
        touched = [i for i in t if i in co]
        for i in touched:
            co[i].update(touched)
    placed: dict[int, tuple[int, int]] = {}
    members: list[list[tuple[int, int, int, int]]] = []  # (first, last, offset, end)
    sizes: list[int] = []
    for b in sorted(cands, key=lambda b: (-math.prod(b.dims), b.id)):
        n = -(-math.prod(b.dims) // ALIGN) * ALIGN
        first, last = life[b.id]
        # the arenas of the buffers placed so far that a unit touches with `b`
        taken = {placed[o][0] for o in co[b.id] if o != b.id and o in placed}
        for k in range(MAX_ARENAS):
            if k == len(members):
                members.append([])
                sizes.append(0)
            if k in taken:
                continue
            busy = sorted([(off, end) for f, la, off, end in members[k]
                           if la >= first and f <= last])  # (lifetimes overlapping b's)
            off = 0
            for lo, hi in busy:
                if off + n <= lo:
                    break
                off = max(off, hi)
            placed[b.id] = (k, off)
            members[k].append((first, last, off, off + n))
            sizes[k] = max(sizes[k], off + n)
            break
    # an arena of one buffer saves nothing: that buffer keeps its own storage
    alone = {k for k in range(len(members)) if len(members[k]) < 2}
    renum = {k: j for j, k in enumerate(k for k in range(len(members)) if k not in alone)}
    return ({b: (renum[k], off) for b, (k, off) in placed.items() if k in renum},
            [sizes[k] for k in sorted(renum)])


def _rewrite(us: Sequence[Stmt], place: dict[int, tuple[int, int]], arenas: Sequence[Buffer],
             prog: LoopProgram, touch: Sequence[Collection[int]]) -> list[Stmt]:
    """The units with every access of a shared buffer moved to its arena."""
    next_id = 1 + max([x.symbol.id for u in us for x in stmt_nodes(u) if isinstance(x, ForLoop)]
                      + [s.id for s in prog.static_args] + [0])

    def flat(b: Buffer, index: tuple[IndexExpr, ...]) -> tuple[Buffer, tuple[IndexExpr, ...]]:
        k, off = place[b.id]
        terms, offset = flat_terms(b.dims, index)
        return arenas[k], (IndexExpr(tuple((c, s) for s, c in terms.items() if c), offset + off),)

    def expr(e: Expr) -> Expr | None:
        if isinstance(e, Get) and e.buffer.id in place:
            return Get(*flat(e.buffer, e.index))
        return None

    def stmt(s: Stmt) -> Stmt | None:
        nonlocal next_id
        if isinstance(s, SetCell) and s.buffer.id in place:
            return SetCell(*flat(s.buffer, s.index), s.value)
        if isinstance(s, Fill) and s.buffer.id in place:
            k, off = place[s.buffer.id]
            sym = Symbol(next_id, "k")
            next_id += 1
            cell = SetCell(arenas[k], (IndexExpr(((1, sym),), off),), Const(s.value))
            return ForLoop(sym, math.prod(s.buffer.dims), cell)
        return None

    return [map_stmt(u, expr=expr, stmt=stmt)
            if not place.keys().isdisjoint(t) else u
            for u, t in zip(us, touch, strict=True)]


def live_peak_cells(prog: LoopProgram, keep: frozenset[int]) -> int:
    """The most cells of buffers not in `keep` (the routine's intermediates) live during one
    unit of `prog`, a buffer being live from the first unit touching it to the last: the
    least an allocator by liveness needs besides the kept state.

    Example: ``live_peak_cells(prog, frozenset({w.id}))``.
    """
    _, us = body_units(prog)
    life: dict[int, list[int]] = {}
    for k, u in enumerate(us):
        for b in buffer_accesses(u):
            life.setdefault(b, [k, k])[1] = k
    return _peak({b.id: math.prod(b.dims) for b in prog.buffers if b.id not in keep}, life,
                 len(us))


def _peak(cells: dict[int, int], life: dict[int, list[int]], n_units: int) -> int:
    """The most cells of these buffers live during one unit (`life`: first and last unit)."""
    delta = [0] * (n_units + 1)
    for b, n in cells.items():
        if b in life:
            delta[life[b][0]] += n
            delta[life[b][1] + 1] -= n
    peak = live = 0
    for d in delta:
        live += d
        peak = max(peak, live)
    return peak
