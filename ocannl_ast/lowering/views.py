"""Batch-slice views (OCANNL's `x @| i` as a view, not a copy): every access of a viewing
buffer becomes the same access of its parent's cells at the slice's runtime index, so a
write through the slice reaches the parent and a read sees the parent's current values.

Stage: the end of `lowering.lower`. Input: a loop body whose buffers may carry a
`loop_ir.View`. Output: the body over the parents only, each leading index checked first.
"""

from __future__ import annotations

import math

from ..errors import ShapeError
from .ids import fresh_id
from .loop_ir import (
    Buffer,
    CheckIndex,
    Const,
    Expr,
    Fill,
    Get,
    IndexExpr,
    Noop,
    SetCell,
    SetFromVec,
    Stmt,
    Symbol,
)
from .loop_ir import Seq as LSeq
from .nests import nest
from .walk import map_stmt

#: the CheckIndex code of a batch index out of its axis (as the slice's own check)
BATCH_INDEX_CODE = 1


def parent_index(buf: Buffer, index: tuple[IndexExpr, ...]) -> tuple[IndexExpr, ...]:
    """The parent's index of cell `index` of a viewing buffer."""
    v = buf.view
    assert v is not None
    return v.lead + tuple(IndexExpr(ix.terms, ix.offset + s)
                          for ix, s in zip(index, v.shift, strict=True))


def resolve_views(body: Stmt) -> Stmt:
    """`body` with every viewing buffer's access moved to its parent, preceded by the
    checks of the views' runtime indices (before any access: a bad index touches nothing).

    Example: ``resolve_views(SetCell(view_buf, (i,), Const(1.0)))``.
    """
    checks: Checks = {}
    return guarded(resolve_part(body, checks), checks)


#: the (static symbol, bound) checks of the views met so far, in order (a dict as a set)
Checks = dict[tuple[Symbol, int], None]


def resolve_part(s: Stmt, checks: Checks) -> Stmt:
    """`s` with its viewing buffers' accesses moved to their parents, their checks added
    to `checks` in order: `resolve_views` of a program is `guarded` of its parts resolved
    in order (`lower` resolves only the parts that use a view)."""
    def note(buf: Buffer) -> Buffer:
        assert buf.view is not None
        checks.update((c, None) for c in buf.view.checks)
        return buf.view.parent

    def expr(e: Expr) -> Expr | None:
        if isinstance(e, Get) and e.buffer.view is not None:
            return Get(note(e.buffer), parent_index(e.buffer, e.index))
        return None

    def stmt(s: Stmt) -> Stmt | None:
        match s:
            case SetCell(buffer=b, index=ix, value=v) if b.view is not None:
                return SetCell(note(b), parent_index(b, ix), v)
            case Fill(buffer=b, value=v) if b.view is not None:
                return _fill(b, note(b), v)
            case SetFromVec(buffer=b) if b.view is not None:
                return _from_vec(s, note(b))
            case _:
                return None

    return map_stmt(s, expr=expr, stmt=stmt)


def guarded(body: Stmt, checks: Checks) -> Stmt:
    """`body` (its views resolved) preceded by the `checks`, each once."""
    if not checks:
        return body
    guards = tuple(CheckIndex(IndexExpr(((1, sym),), 0), bound, BATCH_INDEX_CODE)
                   for sym, bound in checks)
    # a static index never changes within a routine: the same check again is redundant
    body = map_stmt(body, stmt=lambda s: Noop() if isinstance(s, CheckIndex) and s in guards
                    else None)
    return LSeq((*guards, body))


def _fill(view: Buffer, parent: Buffer, value: float) -> Stmt:
    """A fill of the view: only its cells of the parent (a loop over them)."""
    loops: list[tuple[Symbol, int]] = []
    index: list[IndexExpr] = []
    for d in view.dims:
        if d == 1:
            index.append(IndexExpr((), 0))
            continue
        s = Symbol(fresh_id(), "v")
        loops.append((s, d))
        index.append(IndexExpr(((1, s),), 0))
    return nest(loops, SetCell(parent, parent_index(view, tuple(index)), Const(value)))


def _from_vec(s: SetFromVec, parent: Buffer) -> Stmt:
    """Set_from_vec through a view: the view's cells must be one contiguous run of the
    parent starting on a vector boundary (unpadded parent, whole trailing axes)."""
    view = s.buffer
    v = view.view
    assert v is not None
    n = math.prod(view.dims)
    if any(v.shift) or parent.dims[len(v.lead):] != view.dims or n % s.length:
        raise ShapeError(f"a vectorized write ({s.op.value}, {s.length} cells at a time) "
                         f"into the batch slice '{view.name}' of '{parent.name}': the slice's "
                         "cells are not whole vectors of its parent; write into a tensor of "
                         "its own and copy it into the slice")
    start: list[tuple[int, Symbol]] = []
    offset, stride = 0, n
    for ix, d in zip(reversed(v.lead), reversed(parent.dims[:len(v.lead)]), strict=True):
        start.extend((c * stride // s.length, sym) for c, sym in ix.terms)
        offset += ix.offset * stride // s.length
        stride *= d
    vector = IndexExpr((*s.vector.terms, *start), s.vector.offset + offset)
    return SetFromVec(parent, vector, s.op, s.value, s.length)
