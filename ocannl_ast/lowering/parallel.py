"""Threads for the whole step: the outermost loop of a nest whose iterations are
independent runs on several threads (`ForLoop.threads`; an OpenMP parallel loop in C).

A nest qualifies when its outermost loop's iterations touch disjoint cells: every buffer it
writes is written (anywhere in the nest) at one index, injective over the loops enclosing
the write, and read only at that index; its scalar locals are declared inside the loop
(private to an iteration); it has no fills, vector sets or index checks. Each cell is then
computed by one thread with the same operations in the same order as by one thread alone:
the results are the same bits for any thread count. Nests below `MIN_WORK` innermost
executions stay serial (sharing them out would cost more than it saves). A nest holding a
sum of products is marked too: the C backend keeps it serial where its contraction kernel
takes the nest or a loop inside it (the kernel threads itself, and sums with other
roundings than the loops it replaces), and shares out the rest.

Stage: the last scheduling pass (`pipeline_passes.parallel_loops`). Input: a `LoopProgram`
and a thread count. Output: the program with the chosen loops marked, and their count.
"""

from __future__ import annotations

from typing import assert_never

from .. import config
from ..records import record
from .loop_ir import (
    CheckIndex,
    Comment,
    DeclLocal,
    Fill,
    ForLoop,
    Get,
    IndexExpr,
    LoopProgram,
    Noop,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
)
from .nests import body_units, noted
from .schedule import Scheduled, cell_injective, same_cell
from .walk import Loop, gets, scoped, work

#: innermost executions a nest needs to be run on threads: with the C backend's one parallel
#: region per step (`backends.c_region`) a parallel loop costs one barrier (about a
#: microsecond on two idle cores); 16K executions take some tens of microseconds.
MIN_WORK = 1 << 14


def thread_count() -> int:
    """``OCANNL_AST_THREADS``: a positive count, ``auto`` (the machine's cores), else 1
    (also for a malformed value: the C backend reports that one when it renders)."""
    raw = config.threads()
    if raw.lower() == "auto":
        import os

        return max(1, os.cpu_count() or 1)
    return int(raw) if raw.isdigit() and int(raw) > 0 else 1


def mark_parallel(prog: LoopProgram, threads: int, min_work: int | None = None) -> Scheduled:
    """Mark the outermost loop of each independent nest of at least `min_work` innermost
    executions (default `MIN_WORK`) to run on `threads` threads.

    Example: ``mark_parallel(prog, 2).changed``.
    """
    min_work = MIN_WORK if min_work is None else min_work  # (read now: tests may change it)
    notes, rest = body_units(prog)
    out: list[Stmt] = []
    changed = 0
    for u in rest:
        ok = (threads > 1 and isinstance(u, ForLoop) and u.extent > 1 and u.threads == 1
              and work(u) >= min_work and parallel_safe(u))
        if ok and isinstance(u, ForLoop):
            u = ForLoop(u.symbol, u.extent, u.body, threads)
            changed += 1
        out.append(u)
    more = [f"parallel: {changed} loop nest{'s' if changed != 1 else ''} on {threads} threads"] \
        if changed else []
    return Scheduled(noted(prog, notes, more, out, frozenset()), changed)


def parallel_safe(loop: ForLoop) -> bool:
    """Whether the iterations of `loop` touch disjoint cells (see the module docstring)."""
    return safety(loop) is not None


@record
class Safety:
    """What makes a nest `parallel_safe`: the index at which it writes each buffer (its
    first write's) and every read it performs."""

    writes: dict[int, tuple[IndexExpr, ...]]
    reads: list[Get]


def safety(loop: ForLoop) -> Safety | None:
    """The writes and reads of `loop` when it is `parallel_safe`, else None."""
    return extend_safety(Safety({}, []), loop, ())


def extend_safety(known: Safety, part: Stmt, outer: tuple[Loop, ...]) -> Safety | None:
    """The `Safety` of a nest made of a safe nest's statements (`known`), then `part` under
    that nest's loops `outer` (all of them ordinary loops), when it is safe, else None:
    `safety` of the whole, without walking the safe nest again (row fusion grows one nest
    a part at a time). Example: ``extend_safety(safety(a), b_body, ((i, 4),))``."""
    writes = dict(known.writes)
    reads: list[Get] = []
    for s, loops in scoped(part):  # (one walk: the writes, and the reads to check after)
        match s:
            case SetCell(buffer=buf, index=index, value=v):
                if buf.uint4x32 or not cell_injective((*outer, *loops), s):
                    return None
                first = writes.setdefault(buf.id, index)
                if not same_cell(buf, first, index):
                    return None
                reads += gets(v)
            case DeclLocal(init=v) | SetLocal(value=v):
                reads += gets(v)
            case Fill() | SetFromVec() | CheckIndex():
                return None
            case ForLoop(threads=th) if th > 1:
                return None
            case ForLoop() | Seq() | Noop() | Comment():
                pass
            case _:
                assert_never(s)
    fresh = writes.keys() - known.writes.keys()  # the known reads met only the known writes
    for g in (*[g for g in known.reads if g.buffer.id in fresh], *reads):
        at = writes.get(g.buffer.id)
        if at is not None and not same_cell(g.buffer, at, g.index):
            return None
    return Safety(writes, known.reads + reads)
