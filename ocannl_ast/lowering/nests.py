"""Loop nests of the loop IR: the units a program is a sequence of, perfect nests and the
reduction nest `lower` writes, row-major flat indices, and the notes by which a pass says
what it decided (leading comments of the body).

Stage: shared by the loop-IR passes and the C backend's kernel and reordering hooks.
Input and output: loop-IR nodes (`loop_ir`); traversals come from `walk`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import assert_never

from ..records import record
from .loop_ir import (
    CheckIndex,
    Comment,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    IndexExpr,
    LoopProgram,
    Noop,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
    Symbol,
)
from .unit_memo import memoized
from .walk import Loop, gets

# ---- units and loop nests ------------------------------------------------------------

#: statements that do nothing (a tuple: `Noop | Comment` would build a union per test)
_BLANK = (Noop, Comment)


def units(s: Stmt) -> list[Stmt]:
    """The top-level statements in order: nested sequences flattened, except the blocks
    that declare a local (they scope it)."""
    if not isinstance(s, Seq) or DeclLocal in map(type, s.stmts):  # (C-level scan)
        return [s]
    out: list[Stmt] = []
    for x in s.stmts:  # (a statement other than a block is its own unit: no call for it)
        if isinstance(x, Seq):
            out += units(x)
        else:
            out.append(x)
    return out


def single(s: Stmt) -> Stmt:
    """A Seq of one statement (comments and no-ops aside) is that statement."""
    if isinstance(s, Seq):
        subs = [x for x in s.stmts if not isinstance(x, _BLANK)]
        if len(subs) == 1:
            return single(subs[0])
    return s


def peel(s: Stmt) -> tuple[list[Loop], Stmt]:
    """The loops of a perfect nest (outermost first) and the statement inside them."""
    loops, inner = _peeled(s)
    return list(loops), inner


@memoized
def _peeled(s: Stmt) -> tuple[tuple[Loop, ...], Stmt]:
    loops: list[Loop] = []
    s = single(s)
    while isinstance(s, ForLoop):
        loops.append((s.symbol, s.extent))
        s = single(s.body)
    return tuple(loops), s


def nest(loops: Sequence[Loop], body: Stmt) -> Stmt:
    """``for loops: body`` (outermost first); no loops: `body` itself."""
    for sym, n in reversed(loops):
        body = ForLoop(sym, n, body)
    return body


@record
class ReductionNest:
    """``for outer: { acc = init; for reduce: acc = step; store }`` (comments aside), the
    form `lower` gives a reduction into a scalar local."""

    outer: tuple[Loop, ...]
    reduce: tuple[Loop, ...]  #: at least one loop
    acc: str  #: the local's name
    init: Expr
    step: Expr  #: the new value of `acc` (reads ``GetLocal(acc)``)
    store: SetCell  #: writes the result (reads ``GetLocal(acc)``)

    def rebuilt(self, store: SetCell) -> Stmt:
        """The same nest storing with `store` instead."""
        block = Seq((DeclLocal(self.acc, self.init),
                     nest(self.reduce, SetLocal(self.acc, self.step)), store))
        return nest(self.outer, block)


@memoized
def match_reduction(s: Stmt) -> ReductionNest | None:
    """The reduction nest `s` is, or None; every loop symbol is distinct."""
    outer, body = peel(s)
    if not isinstance(body, Seq):
        return None
    subs = [x for x in body.stmts if not isinstance(x, _BLANK)]
    if len(subs) != 3 or not isinstance(subs[0], DeclLocal) or not isinstance(subs[1], ForLoop):
        return None
    decl, store = subs[0], subs[2]
    red, inner = peel(subs[1])
    if not isinstance(store, SetCell) or not isinstance(inner, SetLocal):
        return None
    if inner.name != decl.name or not red:
        return None
    syms = [sym for sym, _ in (*outer, *red)]
    if len(set(syms)) != len(syms):
        return None
    return ReductionNest(tuple(outer), tuple(red), decl.name, decl.init, inner.value, store)


def cellwise(s: Stmt) -> tuple[SetCell, tuple[Symbol | None, ...]] | None:
    """`s` as ``for loops: buf[loop symbols] = value``, writing each cell of `buf` exactly
    once (each loop indexes one axis, in full), and the loop symbol of each axis (None: an
    axis of size 1)."""
    loops, cell = _peeled(s)  # (read only: no copy)
    if not isinstance(cell, SetCell) or cell.buffer.uint4x32 or \
            len(cell.index) != len(cell.buffer.dims):
        return None
    extents = dict(loops)
    axes: list[Symbol | None] = []
    for ix, d in zip(cell.index, cell.buffer.dims, strict=True):
        terms = ix.terms
        if ix.offset != 0:
            return None
        if not terms and d == 1:
            axes.append(None)
        elif len(terms) == 1 and terms[0][0] == 1 and extents.get(terms[0][1]) == d:
            axes.append(terms[0][1])
        else:
            return None
    if sorted([a.id for a in axes if a]) != sorted([sym.id for sym in extents]):
        return None  # a loop not indexing the buffer writes cells repeatedly
    return cell, tuple(axes)


def flat_terms(dims: Sequence[int], index: Sequence[IndexExpr]) -> tuple[dict[Symbol, int], int]:
    """The row-major flat offset of `index` into an array of extents `dims`, as the
    coefficient of each symbol (like terms merged; zeros kept) and a constant."""
    terms: dict[Symbol, int] = {}
    offset = 0
    for axis, e in enumerate(index):
        stride = math.prod(dims[axis + 1:])
        for coeff, sym in e.terms:
            terms[sym] = terms.get(sym, 0) + coeff * stride
        offset += e.offset * stride
    return terms, offset


# ---- accesses per buffer -------------------------------------------------------------

#: one statement's accesses of one buffer (`buffer_accesses`): the statement, the loops
#: around it (outermost first), the indices at which it reads the buffer, and its path from
#: the unit (per level, the position in a `Seq`, or -1 for a `ForLoop`'s body)
Access = tuple[Stmt, tuple[Loop, ...], tuple[tuple[IndexExpr, ...], ...], tuple[int, ...]]


@memoized
def buffer_accesses(u: Stmt) -> dict[int, tuple[Access, ...]]:
    """Per buffer id that unit `u` reads or writes, the statements touching it in program
    order (one walk of the unit answers every buffer's questions: `full_write`, and
    `scalarize`'s)."""
    out: dict[int, list[Access]] = {}
    stack: list[tuple[Stmt, tuple[Loop, ...], tuple[int, ...]]] = [(u, (), ())]
    while stack:
        x, loops, path = stack.pop()
        match x:
            case Seq(stmts=stmts):
                stack += [(stmts[i], loops, (*path, i)) for i in range(len(stmts) - 1, -1, -1)]
                continue
            case ForLoop(symbol=sym, extent=n, body=body):
                stack.append((body, (*loops, (sym, n)), (*path, -1)))
                continue
            case SetCell(buffer=b, value=v) | SetFromVec(buffer=b, value=v):
                written: int | None = b.id
            case DeclLocal(init=v) | SetLocal(value=v):
                written = None
            case Fill(buffer=b):
                out.setdefault(b.id, []).append((x, loops, (), path))
                continue
            case Noop() | Comment() | CheckIndex():
                continue
            case _:
                assert_never(x)
        read: dict[int, list[tuple[IndexExpr, ...]]] = {}
        for g in gets(v):
            read.setdefault(g.buffer.id, []).append(g.index)
        if written is not None and written not in read:
            read[written] = []
        for bid, ixs in read.items():
            out.setdefault(bid, []).append((x, loops, tuple(ixs), path))
    return {bid: tuple(acs) for bid, acs in out.items()}



# ---- a pass's decisions, as leading comments ----------------------------------------

#: how the virtualization passes' notes begin (`noted`): a pass adds its own after them
NOTE_PREFIXES = ("constant: ", "virtual: ")


def body_units(prog: LoopProgram) -> tuple[list[Stmt], list[Stmt]]:
    """The earlier passes' notes leading `prog`'s body, and its other units (no-ops
    dropped)."""
    us: list[Stmt] = [u for u in units(prog.body) if not isinstance(u, Noop)]
    k = 0
    while k < len(us) and isinstance(u := us[k], Comment) and u.text.startswith(NOTE_PREFIXES):
        k += 1
    return us[:k], us[k:]


def noted(prog: LoopProgram, notes: Sequence[Stmt], more: Sequence[str],
          rest: Sequence[Stmt], dropped: frozenset[int]) -> LoopProgram:
    """`prog` with body: the earlier `notes`, then `more` as comments, then `rest`; and the
    buffers whose ids are in `dropped` removed from its parameters."""
    body = Seq((*notes, *(Comment(n) for n in more), *rest))
    buffers = tuple(b for b in prog.buffers if b.id not in dropped)
    return LoopProgram(prog.name, buffers, prog.static_args, body, prog.precision)
