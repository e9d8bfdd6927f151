"""Loop fusion of adjacent pointwise nests over the same iteration space: ``for i: a[i] = f``
then ``for i: b[i] = g(a[i])`` become ``for i: { a[i] = f; b[i] = g(a[i]) }``, one pass over
memory instead of two (an optimizer's update of one parameter becomes one nest).

Fused only where the iterations of the fused nest are independent (`schedule.independent`:
every written buffer is written at one injective index and read only at that cell): then
each cell sees the same operations in the same order as before, so the same bits.

Stage: a loop-IR pass after `interchange`. Input: a `LoopProgram`. Output: the program and
how many nests were merged into their predecessor.
"""

from __future__ import annotations

from ..records import record
from .loop_ir import (
    Comment,
    Get,
    IndexExpr,
    LoopProgram,
    Noop,
    Seq,
    SetCell,
    Stmt,
    Symbol,
)
from .nests import body_units, nest, noted, peel
from .schedule import Scheduled, cell_injective, rename, same_cell, summed_product
from .walk import Loop, gets

#: cells of one fused body at most (a long body spills registers and stops vectorizing)
MAX_CELLS = 8


def fuse_nests(prog: LoopProgram, max_cells: int = MAX_CELLS) -> Scheduled:
    """Merge each perfect pointwise nest into the one before it where they iterate over the
    same extents and the merged iterations stay independent.

    Example: ``fuse_nests(prog).changed``.
    """
    notes, rest = body_units(prog)
    out: list[Stmt] = []
    last: tuple[list[Loop], list[SetCell]] | None = None
    known: _Cells | None = None  # `last`'s writes and reads once a merge checked them
    changed = 0
    for u in rest:
        cur = _pointwise(u)
        merged = _merge(last, cur, max_cells, known) if last is not None and cur is not None \
            else None
        if merged is not None and last is not None:
            cells, known = merged
            out[-1] = nest(last[0], Seq(tuple(cells)))
            last = (last[0], cells)
            changed += 1
            continue
        out.append(u)
        last, known = cur, None
    plural = "s" if changed != 1 else ""
    more = [f"fused: {changed} pointwise nest{plural} into the one before"] if changed else []
    return Scheduled(noted(prog, notes, more, out, frozenset()), changed)


def _pointwise(u: Stmt) -> tuple[list[Loop], list[SetCell]] | None:
    """A perfect nest (at least one loop) whose body is assignments to cells only, none a
    summed accumulating product (`schedule.summed_product`: a contraction kernel's)."""
    loops, body = peel(u)
    if not loops:
        return None
    stmts = [x for x in body.stmts if not isinstance(x, (Noop, Comment))] \
        if isinstance(body, Seq) else [body]
    if not stmts or not all(isinstance(x, SetCell) for x in stmts):
        return None
    cells = [x for x in stmts if isinstance(x, SetCell)]
    if any(summed_product(c, loops) for c in cells):
        return None
    return loops, cells  # independence is checked on merging (it implies each part's)


@record
class _Cells:
    """The cells of an independent nest body: the first write of each buffer, and every
    read (`schedule.independent`'s facts, kept to extend the body one nest at a time)."""

    written: dict[int, SetCell]
    reads: list[Get]


def _extend(loops: list[Loop], known: _Cells, cells: list[SetCell]) -> _Cells | None:
    """`known` (an independent body over `loops`) followed by `cells`, if the whole stays
    independent (`schedule.independent` of the whole, without checking `known` again)."""
    written = dict(known.written)
    for c in cells:
        if c.buffer.uint4x32 or not cell_injective(loops, c):
            return None
        first = written.setdefault(c.buffer.id, c)
        if not same_cell(c.buffer, first.index, c.index):
            return None
    reads = [g for c in cells for g in gets(c.value)]
    fresh = written.keys() - known.written.keys()  # the known reads met the known writes
    for g in (*[g for g in known.reads if g.buffer.id in fresh], *reads):
        w = written.get(g.buffer.id)
        if w is not None and not same_cell(g.buffer, w.index, g.index):
            return None
    return _Cells(written, known.reads + reads)


def _merge(a: tuple[list[Loop], list[SetCell]], b: tuple[list[Loop], list[SetCell]],
           max_cells: int, known: _Cells | None) -> tuple[list[SetCell], _Cells] | None:
    """`b`'s cells renamed onto `a`'s loops and appended to `a`'s, if legal, and the
    merged body's `_Cells` (`known`: `a`'s, when a merge checked them)."""
    (la, ca), (lb, cb) = a, b
    if len(la) != len(lb) or any(n != m for (_, n), (_, m) in zip(la, lb, strict=True)):
        return None
    if len(ca) + len(cb) > max_cells:
        return None
    sub: dict[Symbol, IndexExpr] = {sb: IndexExpr(((1, sa),), 0)
                                    for (sa, _), (sb, _) in zip(la, lb, strict=True)}
    try:
        renamed = [rename(c, sub) for c in cb]
    except ValueError:  # a loop symbol read as a number that cannot be renamed
        return None
    ok = _extend(la, _Cells({}, []), [*ca, *renamed]) if known is None else \
        _extend(la, known, renamed)
    return None if ok is None else ([*ca, *renamed], ok)
