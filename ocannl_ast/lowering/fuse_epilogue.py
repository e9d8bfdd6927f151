"""Epilogue fusion (part of OCANNL's virtual memory mode): a reduction's result read once,
pointwise and at its own cell, by a later unit is not stored: that reader's computation
moves into the reduction's store, and the result buffer leaves the routine.

Stage: a loop-IR pass after `inline`. Input: a `LoopProgram`, the buffer ids that escape,
and the backend's `fusion_limit` (reductions of at least that many multiply-adds are left
alone: the C backend runs them as contraction kernels, which a fused epilogue would hide).
Output: the program over fewer buffers, a note per fused result.
"""

from __future__ import annotations

from ..records import record
from .loop_ir import (
    CONTRACTION_MIN_WORK,
    Buffer,
    Expr,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    SetCell,
    Stmt,
    Symbol,
)
from .nests import ReductionNest, body_units, cellwise, match_reduction, nest, noted, peel
from .walk import Accesses, gets, local_names, map_expr, subst_expr, subst_index, work


@record
class Fused:
    """The program after epilogue fusion, and what was decided."""

    prog: LoopProgram
    virtual: frozenset[int]  #: ids of the reduction results no longer stored


def fuse_epilogue(prog: LoopProgram, escaping: frozenset[int],
                  fusion_limit: int = CONTRACTION_MIN_WORK) -> Fused:
    """Fuse each eligible pointwise reader into the reduction whose result it reads.

    Example: ``fuse_epilogue(prog, frozenset({out.id})).virtual``.
    """
    notes, us = body_units(prog)
    acc = Accesses()
    virtual: set[int] = set()
    more: list[str] = []
    pos = 0
    while pos < len(us):
        fused = _fuse_at(us, pos, escaping, fusion_limit, acc)
        if fused is None:
            pos += 1
            continue
        us, buf = fused
        virtual.add(buf.id)
        more.append(f"virtual: {buf.name} (its reader fused into the reduction)")
    return Fused(noted(prog, notes, more, us, frozenset(virtual)), frozenset(virtual))


def _fuse_at(us: list[Stmt], pos: int, escaping: frozenset[int], fusion_limit: int,
             acc: Accesses) -> tuple[list[Stmt], Buffer] | None:
    """The units with the reader of unit `pos`'s result fused into it, and that result."""
    red = match_reduction(us[pos])
    if red is None or red.store.buffer.id in escaping or red.store.value != GetLocal(red.acc) \
            or work(us[pos]) >= fusion_limit:
        return None
    cw = cellwise(nest(red.outer, red.store))
    buf = red.store.buffer
    if cw is None or not _single_reader(us, pos, buf.id, acc):
        return None
    k = next(j for j in range(pos + 1, len(us)) if buf.id in acc.read_ids(us[j]))
    reader = cellwise(us[k])
    if reader is None:
        return None
    cell, _ = reader
    ren = _axis_renaming(us[k], cell, buf, cw[1])
    if ren is None or not _movable(us, pos, k, cell, acc):
        return None
    return [*us[:pos], _fused(red, cell, ren), *us[pos + 1:k], *us[k + 1:]], buf


def _fused(red: ReductionNest, cell: SetCell, ren: dict[Symbol, Symbol]) -> Stmt:
    """The reduction storing the reader's value (its loop symbols renamed to the
    reduction's) with the read of the result replaced by the accumulator."""
    sub = {c: IndexExpr(((1, p),), 0) for c, p in ren.items()}
    result = red.store.buffer.id

    def local(e: Expr) -> Expr | None:
        return GetLocal(red.acc) if isinstance(e, Get) and e.buffer.id == result else None

    val = map_expr(cell.value, local)
    store = SetCell(cell.buffer, tuple(subst_index(ix, sub) for ix in cell.index),
                    subst_expr(val, sub))
    return red.rebuilt(store)


def _single_reader(us: list[Stmt], pos: int, bid: int, acc: Accesses) -> bool:
    """Written only by unit `pos` (which does not read it), read by exactly one later unit."""
    if bid in acc.read_ids(us[pos]):
        return False
    if any(bid in acc.write_ids(u) for j, u in enumerate(us) if j != pos):
        return False
    if any(bid in acc.read_ids(u) for u in us[:pos]):
        return False
    return sum(1 for u in us[pos + 1:] if bid in acc.read_ids(u)) == 1


def _axis_renaming(u: Stmt, cell: SetCell, buf: Buffer, p_axes: tuple[Symbol | None, ...]
                   ) -> dict[Symbol, Symbol] | None:
    """Reader loop symbol -> reduction loop symbol, when every read of `buf` in the reader
    is at its own iteration's cell and the reader iterates exactly over `buf`'s cells."""
    c_syms = {s for s, _ in peel(u)[0]}
    ren: dict[Symbol, Symbol] = {}
    reads = [g for g in gets(cell.value) if g.buffer.id == buf.id]
    if not reads or local_names(cell.value):
        return None
    for g in reads:
        for ix, p in zip(g.index, p_axes, strict=True):
            if p is None:
                if ix != IndexExpr((), 0):
                    return None
            elif not (len(ix.terms) == 1 and ix.terms[0][0] == 1 and ix.offset == 0
                      and ix.terms[0][1] in c_syms and ren.setdefault(ix.terms[0][1], p) == p):
                return None
    if set(ren) != c_syms or len(set(ren.values())) != len(ren):
        return None
    return ren


def _movable(us: list[Stmt], pos: int, k: int, cell: SetCell, acc: Accesses) -> bool:
    """The reader may run inside the reduction at `pos`: nothing in between touches what it
    writes or writes what it reads, the reduction does not read what it writes, and its
    reads of its own output are at the written cell."""
    out = cell.buffer.id
    ins = {g.buffer.id for g in gets(cell.value)}
    for u in us[pos + 1:k]:
        if any(b == out or b in ins for b in acc.write_ids(u)) or out in acc.read_ids(u):
            return False
    if out in acc.read_ids(us[pos]) or out in acc.write_ids(us[pos]):
        return False
    return all(g.index == cell.index for g in gets(cell.value) if g.buffer.id == out)
