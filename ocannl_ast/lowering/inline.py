"""Inlining (OCANNL's virtual memory mode): a buffer computed once, pointwise over all its
cells, and read at most `max_visits` times per cell later in the same routine is computed
as an expression inside its readers; its buffer leaves the routine.

Stage: a loop-IR pass after `fold_constants`. Input: a `LoopProgram` and the buffer ids
that escape (must stay materialized: params, their grads, optimizer state, anything the
caller may read). Output: the program over fewer buffers, a note per inlined buffer.
"""

from __future__ import annotations

import math

from ..records import record
from .loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Const,
    Expr,
    Get,
    GetLocal,
    LoopProgram,
    SetCell,
    SetFromVec,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    TernOp,
    Unary,
    UnOp,
)
from .nests import body_units, buffer_accesses, cellwise, noted
from .walk import (
    Accesses,
    expr_nodes,
    gets,
    map_stmt,
    own_exprs,
    stmt_nodes,
    subst_expr,
)

#: reads per cell up to which a pointwise node is recomputed at each reader (OCANNL's
#: `max_visits`); 1: never recompute, only move the computation into its single reader
MAX_VISITS = 1
#: a cheap node (`cheap`: a few additions, products, comparisons of values the routine holds
#: anyway at its last reader) is recomputed at up to this many reads per cell rather than
#: stored: a forward value read again by the backward pass costs no memory then
CHEAP_VISITS = 4
#: the most operations a cheap node's expression has
CHEAP_OPS = 8
_CHEAP = frozenset({UnOp.IDENTITY, UnOp.NEG, UnOp.RELU, UnOp.SAT01, UnOp.NOT, UnOp.SIGN,
                    BinOp.ADD, BinOp.SUB, BinOp.MUL, BinOp.MAX, BinOp.MIN, BinOp.LT, BinOp.LE,
                    BinOp.EQ, BinOp.NE, BinOp.ARG1, BinOp.ARG2, BinOp.RELU_GATE,
                    BinOp.SAT01_GATE, BinOp.OR, BinOp.AND, TernOp.WHERE})


@record
class Inlined:
    """The program after inlining, and what was decided."""

    prog: LoopProgram
    virtual: frozenset[int]  #: ids of the buffers inlined into their readers


@record
class _Producer:
    """`for loops: buf[loop symbols] = expr`, writing every cell of `buf` exactly once."""

    buf: Buffer
    axes: tuple[Symbol | None, ...]  #: the loop symbol indexing each axis (None: size 1)
    expr: Expr


def inline(prog: LoopProgram, escaping: frozenset[int], max_visits: int = MAX_VISITS
           ) -> Inlined:
    """Inline every eligible producer into its readers, in program order.

    Example: ``inline(prog, frozenset({w.id})).virtual``.
    """
    notes, rest = body_units(prog)
    slots: list[Stmt | None] = list(rest)
    ix = _Index(slots, Accesses(), escaping)
    virtual: set[int] = set()
    more: list[str] = []
    for pos, unit in enumerate(slots):
        prod = _producer(unit) if unit is not None else None
        if (unit is None or prod is None or prod.buf.id in escaping
                or not _eligible(slots, ix, pos, prod, max_visits)):
            continue
        readers = sorted(ix.readers[prod.buf.id])
        n = sum(_count_gets(_some(slots[k]), prod.buf) for k in readers)
        for k in readers:
            u = _some(slots[k])
            pre = ix.inlined  # the last reader already inlined by `_eligible`
            ix.replace(slots, k, pre[2] if pre is not None and pre[0] is u and pre[1] is prod
                       else _inline(u, prod))
        ix.inlined = None
        ix.replace(slots, pos, None)
        virtual.add(prod.buf.id)
        more.append(f"virtual: {prod.buf.name} (inlined into {n} read{'s' if n != 1 else ''})")
    kept = [u for u in slots if u is not None]
    return Inlined(noted(prog, notes, more, kept, frozenset(virtual)), frozenset(virtual))


class _Index:
    """Which unit positions read and write each buffer; kept current while inlining
    replaces readers (positions stay: a removed unit leaves a hole), so each candidate is
    judged in time proportional to its own readers, not to the program."""

    def __init__(self, slots: list[Stmt | None], acc: Accesses,
                 escaping: frozenset[int] = frozenset()) -> None:
        self.acc = acc
        self.escaping = escaping
        #: the last reader, the producer, and that reader with the producer inlined, as
        #: `_eligible` computed it (the inlining that follows reuses it)
        self.inlined: tuple[Stmt, _Producer, Stmt] | None = None
        self.readers: dict[int, set[int]] = {}
        self.writers: dict[int, set[int]] = {}
        for k, u in enumerate(slots):
            if u is not None:
                self._add(k, u)

    def _add(self, k: int, u: Stmt) -> None:
        for b in self.acc.read_ids(u):
            self.readers.setdefault(b, set()).add(k)
        for b in self.acc.write_ids(u):
            self.writers.setdefault(b, set()).add(k)

    def replace(self, slots: list[Stmt | None], k: int, new: Stmt | None) -> None:
        """Put `new` (None: a hole) at position `k`."""
        old = slots[k]
        if old is not None:
            for b in self.acc.read_ids(old):
                self.readers[b].discard(k)
            for b in self.acc.write_ids(old):
                self.writers[b].discard(k)
        if new is not None:
            self._add(k, new)
        slots[k] = new


def _some(u: Stmt | None) -> Stmt:
    assert u is not None
    return u


def _producer(u: Stmt) -> _Producer | None:
    """The unit as a pointwise producer over every cell of its buffer, or None."""
    cw = cellwise(u)
    if cw is None:
        return None
    cell, axes = cw
    if not _pure(cell.value, {s for s in axes if s is not None}):
        return None
    return _Producer(cell.buffer, axes, cell.value)


def _pure(e: Expr, bound: set[Symbol]) -> bool:
    """No locals, no loop symbol read as a number: the expression moves to any reader."""
    return not any(isinstance(x, GetLocal) or (isinstance(x, SymbolValue) and x.symbol in bound)
                   for x in expr_nodes(e))


def _eligible(slots: list[Stmt | None], ix: _Index, pos: int, prod: _Producer,
              max_visits: int) -> bool:
    """Written only here, read only later, read at least once and at most `max_visits`
    times per cell, and nothing the expression reads is written before the last reader."""
    bid = prod.buf.id
    if ix.writers.get(bid, set()) != {pos}:
        return False
    readers = sorted(ix.readers.get(bid, ()))
    if not readers or readers[0] <= pos:
        return False  # a result nothing here reads (the caller's), or read before/by itself
    units = [_some(slots[k]) for k in readers]
    if any(_word_read(u, bid) for u in units):
        return False  # read as uint4x32 words
    if _is_word(prod.expr) and any(_key_read(u, bid) for u in units):
        return False  # stored, the word is a number (its word 0); inlined, read whole
    n = sum(_visits(u, bid) for u in units)
    copy = isinstance(prod.expr, Get | Const)  # a plain read costs nothing to repeat
    cells = max(1, math.prod(prod.buf.dims))
    inputs = {g.buffer.id for g in gets(prod.expr)}
    if not copy and n > max_visits * cells and not (
            n <= CHEAP_VISITS * cells and cheap(prod.expr)
            and all(i in ix.escaping or _last_use(ix, i) >= readers[-1] for i in inputs)):
        return False
    if any(pos < w < readers[-1] for i in inputs for w in ix.writers.get(i, ())):
        return False
    last = units[-1]
    if inputs.isdisjoint(ix.acc.write_ids(last)):
        return True
    ix.inlined = (last, prod, _inline(last, prod))  # (kept for the inlining itself)
    return _in_place(ix.inlined[2])


def cheap(e: Expr) -> bool:
    """Whether recomputing `e` costs less than storing and reloading it: at most `CHEAP_OPS`
    additions, products, comparisons or selections (no division, no transcendental).

    Example: ``cheap(Binary(BinOp.MUL, x, x))`` is True, ``cheap(Unary(UnOp.EXP, x))``
    False."""
    ops = [x for x in expr_nodes(e) if isinstance(x, Unary | Binary | Ternary)]
    return len(ops) <= CHEAP_OPS and all(x.op in _CHEAP for x in ops)


def _last_use(ix: _Index, bid: int) -> int:
    """The last unit position reading or writing buffer `bid` (-1: none)."""
    return max(ix.readers.get(bid, set()) | ix.writers.get(bid, set()), default=-1)


def _in_place(u: Stmt) -> bool:
    """A cellwise unit whose reads of the buffer it writes are all at the written cell: each
    iteration reads its own cell before writing it, so no read sees another's write."""
    cw = cellwise(u)
    if cw is None:
        return False
    cell, _ = cw
    return all(g.index == cell.index for g in gets(cell.value) if g.buffer.id == cell.buffer.id)


def _visits(u: Stmt, bid: int) -> int:
    """`walk.visits(u, bid)`: the cell reads of buffer `bid` unit `u` performs (a read under
    a loop counting once per iteration), from the unit's access table."""
    return sum(math.prod(n for _, n in loops) * len(reads)
               for _, loops, reads, _ in buffer_accesses(u).get(bid, ()))


def _word_read(u: Stmt, bid: int) -> bool:
    """Whether the unit reads buffer `bid` where a uint4x32 word is expected."""
    return any(reads and (isinstance(x, SetFromVec)
                          or (isinstance(x, SetCell) and x.buffer.uint4x32))
               for x, _, reads, _ in buffer_accesses(u).get(bid, ()))


def _is_word(e: Expr) -> bool:
    return isinstance(e, Binary) and e.op is BinOp.THREEFRY4X32


def _key_read(u: Stmt, bid: int) -> bool:
    """Whether the unit reads buffer `bid` as an operand of threefry (where a word is
    expected: a number there is converted to one)."""
    return any(isinstance(x, Binary) and x.op is BinOp.THREEFRY4X32
               and any(isinstance(o, Get) and o.buffer.id == bid for o in (x.lhs, x.rhs))
               for e in (e for y in stmt_nodes(u) for e in own_exprs(y))
               for x in expr_nodes(e))


def _count_gets(s: Stmt, buf: Buffer) -> int:
    return sum(len(reads) for _, _, reads, _ in buffer_accesses(s).get(buf.id, ()))


def _inline(u: Stmt, prod: _Producer) -> Stmt:
    """Every read of the producer's buffer in `u` replaced by its expression at that cell."""
    def at(e: Expr) -> Expr | None:
        if not isinstance(e, Get) or e.buffer.id != prod.buf.id:
            return None
        sub = {s: ix for s, ix in zip(prod.axes, e.index, strict=True) if s is not None}
        return subst_expr(prod.expr, sub)
    return map_stmt(u, expr=at)
