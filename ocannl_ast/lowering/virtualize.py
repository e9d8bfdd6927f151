"""Virtualization (OCANNL's virtual memory mode): a buffer computed once, pointwise over
all its cells, and read at most `max_visits` times per cell later in the same routine is
inlined as an expression into its readers; its buffer leaves the routine. Scalar constants
(one value in every cell, never written by the routine) are folded into expressions.

Input: a `LoopProgram`, the buffer ids that escape (must stay materialized: params, their
grads, optimizer state, anything the caller may read) and the constants to fold. Output:
an equivalent `LoopProgram` over fewer buffers, its decisions as leading comments, and
the ids of the buffers it virtualized.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, assert_never

from .loop_ir import (
    CONTRACTION_MIN_WORK,
    Binary,
    Buffer,
    CheckIndex,
    Comment,
    Const,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Noop,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    ThreefryUniform,
    Unary,
)

#: reads per cell up to which a pointwise node is recomputed at each reader (OCANNL's
#: `max_visits`); 1: never recompute, only move the computation into its single reader
MAX_VISITS = 1


@dataclass(frozen=True, slots=True)
class Virtualized:
    """The program after virtualization and what was decided."""

    prog: LoopProgram
    virtual: frozenset[int]  #: ids of the buffers inlined into their readers
    folded: frozenset[int]  #: ids of the constant buffers folded into expressions


@dataclass(frozen=True, slots=True)
class _Producer:
    """`for loops: buf[loop symbols] = expr`, writing every cell of `buf` exactly once."""

    buf: Buffer
    axes: tuple[Symbol | None, ...]  #: the loop symbol indexing each axis (None: size 1)
    expr: Expr


def virtualize(prog: LoopProgram, escaping: frozenset[int], constants: Mapping[int, float],
               max_visits: int = MAX_VISITS, fusion_limit: int = CONTRACTION_MIN_WORK
               ) -> Virtualized:
    """Fold the constants, then inline every eligible buffer, in program order.

    Example: ``virtualize(prog, frozenset({w.id}), {}).prog``.
    """
    _memo.cache = {}
    try:
        return _virtualize(prog, escaping, constants, max_visits, fusion_limit)
    finally:
        _memo.cache = None


def _virtualize(prog: LoopProgram, escaping: frozenset[int], constants: Mapping[int, float],
                max_visits: int, fusion_limit: int) -> Virtualized:
    units = _units(prog.body)
    written = {b.id for u in units for b in _writes(u)}
    folds = {k: v for k, v in constants.items() if k not in written}
    folded = {b.id for u in units for b in _reads(u) if b.id in folds}
    if folded:
        units = [_map_stmt(u, lambda g: Const(folds[g.buffer.id])
                           if g.buffer.id in folds else None) for u in units]
    notes: list[str] = [f"constant: {b.name} = {folds[b.id]:g}" for b in prog.buffers
                        if b.id in folded]
    virtual: set[int] = set()
    units = _inline_all(units, escaping, max_visits, virtual, notes)
    units = _fuse_all(units, escaping, virtual, notes, fusion_limit)
    body_stmts = tuple(Comment(n) for n in notes) + tuple(units)
    buffers = tuple(b for b in prog.buffers if b.id not in virtual and b.id not in folded)
    out = LoopProgram(prog.name, buffers, prog.static_args, Seq(body_stmts), prog.precision)
    return Virtualized(out, frozenset(virtual), frozenset(folded))


# ---- units and their reads / writes --------------------------------------------------


def _units(s: Stmt) -> list[Stmt]:
    """The top-level statements in order (nested sequences flattened, except the blocks
    that scope a local accumulator)."""
    match s:
        case Seq(stmts=stmts) if not (stmts and isinstance(stmts[0], DeclLocal)):
            return [u for x in stmts for u in _units(x)]
        case Noop():
            return []
        case _:
            return [s]


def written_buffers(s: Stmt) -> set[int]:
    """Ids of the buffers a statement writes."""
    return {b.id for b in _writes(s)}


def _stmts(s: Stmt) -> Iterator[Stmt]:
    yield s
    match s:
        case Seq(stmts=stmts):
            for x in stmts:
                yield from _stmts(x)
        case ForLoop(body=body):
            yield from _stmts(body)
        case _:
            pass


#: per thread, while `virtualize` runs: (kind, id(stmt)) -> (stmt, its reads or writes).
#: The passes ask for the same units' reads and writes over and over; without this they
#: are quadratic in the program's size (a deep MLP's step took seconds).
_memo = threading.local()


def _memoized(kind: str, s: Stmt, compute: Callable[[Stmt], Any]) -> Any:
    cache: dict[tuple[str, int], tuple[Stmt, Any]] | None = getattr(_memo, "cache", None)
    if cache is None:
        return compute(s)
    hit = cache.get((kind, id(s)))
    if hit is not None and hit[0] is s:
        return hit[1]
    val = compute(s)
    cache[(kind, id(s))] = (s, val)  # holding s keeps its id from being reused
    return val


def _writes(s: Stmt) -> list[Buffer]:
    return _memoized("w", s, _compute_writes)  # type: ignore[no-any-return]


def _write_ids(s: Stmt) -> frozenset[int]:
    return _memoized("wi", s, lambda x: frozenset(b.id for b in _writes(x)))  # type: ignore[no-any-return]


def _read_ids(s: Stmt) -> frozenset[int]:
    return _memoized("ri", s, lambda x: frozenset(b.id for b in _reads(x)))  # type: ignore[no-any-return]


def _compute_writes(s: Stmt) -> list[Buffer]:
    return [x.buffer for x in _stmts(s) if isinstance(x, SetCell | Fill | SetFromVec)]


def _stmt_exprs(s: Stmt) -> list[Expr]:
    match s:
        case SetCell(value=v) | DeclLocal(init=v) | SetLocal(value=v) | SetFromVec(value=v):
            return [v]
        case _:
            return []


def _reads(s: Stmt) -> list[Buffer]:
    return _memoized("r", s, _compute_reads)  # type: ignore[no-any-return]


def _compute_reads(s: Stmt) -> list[Buffer]:
    return [g.buffer for x in _stmts(s) for e in _stmt_exprs(x) for g in _gets(e)]


def _gets(e: Expr) -> Iterator[Get]:
    match e:
        case Get():
            yield e
        case Unary(arg=a):
            yield from _gets(a)
        case Binary(lhs=a, rhs=b):
            yield from _gets(a)
            yield from _gets(b)
        case Ternary(a=a, b=b, c=c):
            for x in (a, b, c):
                yield from _gets(x)
        case Const() | GetLocal() | SymbolValue() | ThreefryUniform():
            pass
        case _:
            assert_never(e)


# ---- eligibility -----------------------------------------------------------------------


def _cellwise(u: Stmt) -> tuple[SetCell, tuple[Symbol | None, ...]] | None:
    """The unit as `for loops: buf[loop symbols] = value`, writing each cell of `buf` exactly
    once (each loop indexes one axis, in full), and the loop symbol of each axis."""
    loops: list[tuple[Symbol, int]] = []
    while isinstance(u, ForLoop):
        loops.append((u.symbol, u.extent))
        u = u.body
    if not isinstance(u, SetCell) or u.buffer.uint4x32 or len(u.index) != len(u.buffer.dims):
        return None
    extents = dict(loops)
    axes: list[Symbol | None] = []
    for ix, d in zip(u.index, u.buffer.dims, strict=True):
        if ix.terms == () and ix.offset == 0 and d == 1:
            axes.append(None)
        elif (len(ix.terms) == 1 and ix.offset == 0 and ix.terms[0][0] == 1
              and extents.get(ix.terms[0][1]) == d):
            axes.append(ix.terms[0][1])
        else:
            return None
    if sorted(s.id for s in axes if s) != sorted(s.id for s in extents):
        return None  # a loop not indexing the buffer writes cells repeatedly
    return u, tuple(axes)


def _producer(u: Stmt) -> _Producer | None:
    """The unit as a pointwise producer over every cell of its buffer, or None."""
    cw = _cellwise(u)
    if cw is None:
        return None
    cell, axes = cw
    if not _pure(cell.value, {s for s in axes if s is not None}):
        return None
    return _Producer(cell.buffer, axes, cell.value)


def _pure(e: Expr, bound: set[Symbol]) -> bool:
    """No locals, no loop symbol read as a number: the expression moves to any reader."""
    match e:
        case GetLocal():
            return False
        case SymbolValue(symbol=s):
            return s not in bound
        case Const() | Get() | ThreefryUniform():
            return True
        case Unary(arg=a):
            return _pure(a, bound)
        case Binary(lhs=a, rhs=b):
            return _pure(a, bound) and _pure(b, bound)
        case Ternary(a=a, b=b, c=c):
            return all(_pure(x, bound) for x in (a, b, c))
        case _:
            assert_never(e)


class _Index:
    """Which unit positions read and write each buffer; kept current while inlining
    replaces readers (positions stay: a removed unit leaves a hole), so each candidate is
    judged in time proportional to its own readers, not to the program."""

    def __init__(self, slots: list[Stmt | None]) -> None:
        self.readers: dict[int, set[int]] = {}
        self.writers: dict[int, set[int]] = {}
        for k, u in enumerate(slots):
            if u is not None:
                self.add(k, u)

    def add(self, k: int, u: Stmt) -> None:
        for b in _read_ids(u):
            self.readers.setdefault(b, set()).add(k)
        for b in _write_ids(u):
            self.writers.setdefault(b, set()).add(k)

    def remove(self, k: int, u: Stmt) -> None:
        for b in _read_ids(u):
            self.readers[b].discard(k)
        for b in _write_ids(u):
            self.writers[b].discard(k)


def _inline_all(units: list[Stmt], escaping: frozenset[int], max_visits: int,
                virtual: set[int], notes: list[str]) -> list[Stmt]:
    """Inline every eligible producer into its readers, in program order."""
    slots: list[Stmt | None] = list(units)
    ix = _Index(slots)
    for pos, unit in enumerate(slots):
        prod = _producer(unit) if unit is not None else None
        if (unit is None or prod is None or prod.buf.id in escaping
                or not _eligible(slots, ix, pos, prod, max_visits)):
            continue
        readers = sorted(ix.readers[prod.buf.id])
        reads = sum(_count_gets(_some(slots[k]), prod.buf) for k in readers)
        for k in readers:
            old = _some(slots[k])
            new = _inline(old, prod)
            ix.remove(k, old)
            ix.add(k, new)
            slots[k] = new
        ix.remove(pos, unit)
        slots[pos] = None
        virtual.add(prod.buf.id)
        notes.append(f"virtual: {prod.buf.name} (inlined into {reads} read"
                     f"{'s' if reads != 1 else ''})")
    return [u for u in slots if u is not None]


def _some(u: Stmt | None) -> Stmt:
    assert u is not None
    return u


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
    visits = sum(_visits(u, bid, []) for u in units)
    copy = isinstance(prod.expr, Get | Const)  # a plain read costs nothing to repeat
    if not copy and visits > max_visits * max(1, _cells(prod.buf)):
        return False
    inputs = {g.buffer.id for g in _gets(prod.expr)}
    if any(pos < w < readers[-1] for i in inputs for w in ix.writers.get(i, ())):
        return False
    last = units[-1]
    return inputs.isdisjoint(_write_ids(last)) or _in_place(_inline(last, prod))


def _in_place(u: Stmt) -> bool:
    """A cellwise unit whose reads of the buffer it writes are all at the written cell: each
    iteration reads its own cell before writing it, so no read sees another's write."""
    cw = _cellwise(u)
    if cw is None:
        return False
    cell, _ = cw
    return all(g.index == cell.index for g in _gets(cell.value) if g.buffer.id == cell.buffer.id)


def _word_read(u: Stmt, bid: int) -> bool:
    """Whether the unit reads buffer `bid` where a uint4x32 word is expected."""
    return any(any(g.buffer.id == bid for e in _stmt_exprs(x) for g in _gets(e))
               for x in _stmts(u)
               if isinstance(x, SetFromVec) or (isinstance(x, SetCell) and x.buffer.uint4x32))


def _cells(buf: Buffer) -> int:
    n = 1
    for d in buf.dims:
        n *= d
    return n


def _visits(s: Stmt, bid: int, loops: list[int]) -> int:
    """How many cell reads of buffer `bid` the statement performs (a read under a loop
    counts once per iteration)."""
    match s:
        case ForLoop(extent=n, body=body):
            return _visits(body, bid, [*loops, n])
        case Seq(stmts=stmts):
            return sum(_visits(x, bid, loops) for x in stmts)
        case _:
            per = 1
            for n in loops:
                per *= n
            return per * sum(1 for e in _stmt_exprs(s) for g in _gets(e) if g.buffer.id == bid)


def _count_gets(s: Stmt, buf: Buffer) -> int:
    return sum(1 for x in _stmts(s) for e in _stmt_exprs(x) for g in _gets(e)
               if g.buffer.id == buf.id)


# ---- rewriting -------------------------------------------------------------------------


def _inline(u: Stmt, prod: _Producer) -> Stmt:
    """Every read of the producer's buffer in `u` replaced by its expression at that cell."""
    def at(g: Get) -> Expr | None:
        if g.buffer.id != prod.buf.id:
            return None
        sub = {s: ix for s, ix in zip(prod.axes, g.index, strict=True) if s is not None}
        return _subst_expr(prod.expr, sub)
    return _map_stmt(u, at)


def _subst_ix(ix: IndexExpr, sub: Mapping[Symbol, IndexExpr]) -> IndexExpr:
    terms: dict[Symbol, int] = {}
    offset = ix.offset
    for c, s in ix.terms:
        rep = sub.get(s)
        if rep is None:
            terms[s] = terms.get(s, 0) + c
            continue
        offset += c * rep.offset
        for c2, s2 in rep.terms:
            terms[s2] = terms.get(s2, 0) + c * c2
    return IndexExpr(tuple((c, s) for s, c in terms.items() if c != 0), offset)


def _subst_expr(e: Expr, sub: Mapping[Symbol, IndexExpr]) -> Expr:
    def get(g: Get) -> Expr:
        return Get(g.buffer, tuple(_subst_ix(ix, sub) for ix in g.index))
    out = _map_expr(e, get)
    return _map_threefry(out, sub)


def _map_threefry(e: Expr, sub: Mapping[Symbol, IndexExpr]) -> Expr:
    match e:
        case ThreefryUniform(key=k, counter=c):
            return ThreefryUniform(k, _subst_ix(c, sub))
        case Unary(op=op, arg=a):
            return Unary(op, _map_threefry(a, sub))
        case Binary(op=op, lhs=a, rhs=b):
            return Binary(op, _map_threefry(a, sub), _map_threefry(b, sub))
        case Ternary(op=op, a=a, b=b, c=c):
            return Ternary(op, *(_map_threefry(x, sub) for x in (a, b, c)))
        case _:
            return e


def _map_expr(e: Expr, f: Callable[[Get], Expr | None]) -> Expr:
    """`e` with each Get replaced by f(get) where that is not None."""
    match e:
        case Get():
            r = f(e)
            return e if r is None else r
        case Unary(op=op, arg=a):
            return Unary(op, _map_expr(a, f))
        case Binary(op=op, lhs=a, rhs=b):
            return Binary(op, _map_expr(a, f), _map_expr(b, f))
        case Ternary(op=op, a=a, b=b, c=c):
            return Ternary(op, *(_map_expr(x, f) for x in (a, b, c)))
        case Const() | GetLocal() | SymbolValue() | ThreefryUniform():
            return e
        case _:
            assert_never(e)


def _map_stmt(s: Stmt, f: Callable[[Get], Expr | None]) -> Stmt:
    match s:
        case Seq(stmts=stmts):
            return Seq(tuple(_map_stmt(x, f) for x in stmts))
        case ForLoop(symbol=sym, extent=n, body=body):
            return ForLoop(sym, n, _map_stmt(body, f))
        case SetCell(buffer=b, index=ix, value=v):
            return SetCell(b, ix, _map_expr(v, f))
        case DeclLocal(name=n, init=v):
            return DeclLocal(n, _map_expr(v, f))
        case SetLocal(name=n, value=v):
            return SetLocal(n, _map_expr(v, f))
        case SetFromVec(buffer=b, vector=vec, op=op, value=v, length=n):
            return SetFromVec(b, vec, op, _map_expr(v, f), n)
        case Noop() | Comment() | Fill() | CheckIndex():
            return s
        case _:
            assert_never(s)


# ---- epilogue fusion: a reduction's result read once, pointwise, by the next reader -----

# Reductions doing at least `fusion_limit` multiply-adds (the backend's: loop_ir's
# C_KERNEL_MIN_WORK for C) are not fused: the C backend runs them as contraction kernels,
# which a fused epilogue would hide.


def _work(s: Stmt) -> int:
    """Innermost statement executions of a loop nest (a bound on its multiply-adds)."""
    match s:
        case ForLoop(extent=n, body=body):
            return n * _work(body)
        case Seq(stmts=stmts):
            return sum(_work(x) for x in stmts)
        case _:
            return 1


def _fuse_all(units: list[Stmt], escaping: frozenset[int], virtual: set[int],
              notes: list[str], fusion_limit: int) -> list[Stmt]:
    """Fuse each eligible pointwise reader into the reduction whose result it reads."""
    pos = 0
    while pos < len(units):
        fused = _fuse_epilogue(units, pos, escaping, fusion_limit)
        if fused is None:
            pos += 1
            continue
        units, buf = fused
        virtual.add(buf.id)
        notes.append(f"virtual: {buf.name} (its reader fused into the reduction)")
    return units


def _reduction(u: Stmt) -> tuple[list[tuple[Symbol, int]], Seq, SetCell] | None:
    """`for outer: {acc = init; for inner: acc = ...; buf[outer] = acc}`, or None."""
    loops: list[tuple[Symbol, int]] = []
    while isinstance(u, ForLoop):
        loops.append((u.symbol, u.extent))
        u = u.body
    if not (isinstance(u, Seq) and len(u.stmts) >= 2 and isinstance(u.stmts[0], DeclLocal)):
        return None
    last = u.stmts[-1]
    if not (isinstance(last, SetCell) and last.value == GetLocal(u.stmts[0].name)):
        return None
    return loops, u, last


def _fuse_epilogue(units: list[Stmt], pos: int, escaping: frozenset[int], fusion_limit: int
                   ) -> tuple[list[Stmt], Buffer] | None:
    red = _reduction(units[pos])
    if red is None or _work(units[pos]) >= fusion_limit:
        return None
    loops, block, last = red
    cw = _cellwise(_nest_loops(loops, last))
    buf = last.buffer
    if cw is None or buf.id in escaping or not _single_reader(units, pos, buf.id):
        return None
    k = next(j for j in range(pos + 1, len(units)) if buf.id in {b.id for b in _reads(units[j])})
    reader = _cellwise(units[k])
    if reader is None:
        return None
    cell, _ = reader
    ren = _axis_renaming(units[k], cell, buf, cw[1])
    if ren is None or not _movable(units, pos, k, cell):
        return None
    sub = {c: IndexExpr(((1, p),), 0) for c, p in ren.items()}
    acc = block.stmts[0]
    assert isinstance(acc, DeclLocal)
    val = _map_expr(cell.value, lambda g: GetLocal(acc.name) if g.buffer.id == buf.id else None)
    new_last = SetCell(cell.buffer, tuple(_subst_ix(ix, sub) for ix in cell.index),
                       _rename_syms(_subst_expr(val, sub), ren))
    new_unit = _nest_loops(loops, Seq((*block.stmts[:-1], new_last)))
    return [*units[:pos], new_unit, *units[pos + 1:k], *units[k + 1:]], buf


def _nest_loops(loops: list[tuple[Symbol, int]], body: Stmt) -> Stmt:
    for sym, n in reversed(loops):
        body = ForLoop(sym, n, body)
    return body


def _single_reader(units: list[Stmt], pos: int, bid: int) -> bool:
    """Written only by unit `pos` (which does not read it), read by exactly one later unit."""
    if bid in _read_ids(units[pos]):
        return False
    if any(bid in _write_ids(u) for j, u in enumerate(units) if j != pos):
        return False
    if any(bid in _read_ids(u) for u in units[:pos]):
        return False
    return sum(1 for u in units[pos + 1:] if bid in _read_ids(u)) == 1


def _axis_renaming(u: Stmt, cell: SetCell, buf: Buffer, p_axes: tuple[Symbol | None, ...]
                   ) -> dict[Symbol, Symbol] | None:
    """Reader loop symbol -> reduction loop symbol, when every read of `buf` in the reader
    is at its own iteration's cell and the reader iterates exactly over `buf`'s cells."""
    c_syms = set(_loop_syms(u))
    ren: dict[Symbol, Symbol] = {}
    gets = [g for g in _gets(cell.value) if g.buffer.id == buf.id]
    if not gets or any(True for _ in _locals(cell.value)):
        return None
    for g in gets:
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


def _loop_syms(u: Stmt) -> list[Symbol]:
    out: list[Symbol] = []
    while isinstance(u, ForLoop):
        out.append(u.symbol)
        u = u.body
    return out


def _locals(e: Expr) -> Iterator[GetLocal]:
    match e:
        case GetLocal():
            yield e
        case Unary(arg=a):
            yield from _locals(a)
        case Binary(lhs=a, rhs=b):
            yield from _locals(a)
            yield from _locals(b)
        case Ternary(a=a, b=b, c=c):
            for x in (a, b, c):
                yield from _locals(x)
        case _:
            pass


def _movable(units: list[Stmt], pos: int, k: int, cell: SetCell) -> bool:
    """The reader may run inside the reduction at `pos`: nothing in between touches what it
    writes or writes what it reads, the reduction does not read what it writes, and its
    reads of its own output are at the written cell."""
    out = cell.buffer.id
    ins = {g.buffer.id for g in _gets(cell.value)}
    for u in units[pos + 1:k]:
        if any(b.id == out or b.id in ins for b in _writes(u)):
            return False
        if any(b.id == out for b in _reads(u)):
            return False
    if any(b.id == out for b in (*_reads(units[pos]), *_writes(units[pos]))):
        return False
    return all(g.index == cell.index for g in _gets(cell.value) if g.buffer.id == out)


def _rename_syms(e: Expr, ren: Mapping[Symbol, Symbol]) -> Expr:
    """`e` with each SymbolValue of a renamed symbol renamed."""
    match e:
        case SymbolValue(symbol=s) if s in ren:
            return SymbolValue(ren[s])
        case Unary(op=op, arg=a):
            return Unary(op, _rename_syms(a, ren))
        case Binary(op=op, lhs=a, rhs=b):
            return Binary(op, _rename_syms(a, ren), _rename_syms(b, ren))
        case Ternary(op=op, a=a, b=b, c=c):
            return Ternary(op, *(_rename_syms(x, ren) for x in (a, b, c)))
        case _:
            return e
