"""The one traversal engine of the loop IR: a bottom-up map and a fold over expressions, a
map and a context-carrying walk over statements, and the queries every pass and backend
asks of a program (reads and writes, free symbols, work); loop nests are in `nests`.

Stage: shared by the loop-IR passes (`fold_constants`, `inline`, `fuse_epilogue`), the
printer, the verifier and the backends. Input and output: loop-IR nodes (`loop_ir`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from operator import is_not
from typing import TypeVar, assert_never

from . import unit_memo
from .loop_ir import (
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

T = TypeVar("T")
C = TypeVar("C")
Loop = tuple[Symbol, int]  #: a loop's iterator and extent
ExprRule = Callable[[Expr], Expr | None]  #: a node's replacement, or None to keep it
StmtRule = Callable[[Stmt], Stmt | None]


# ---- expressions ---------------------------------------------------------------------


def expr_children(e: Expr) -> tuple[Expr, ...]:
    """The direct subexpressions of `e`, left to right."""
    match e:
        case Const() | Get() | GetLocal() | SymbolValue() | ThreefryUniform():
            return ()
        case Unary(arg=a):
            return (a,)
        case Binary(lhs=a, rhs=b):
            return (a, b)
        case Ternary(a=a, b=b, c=c):
            return (a, b, c)
        case _:
            assert_never(e)


def _with_children(e: Expr, kids: tuple[Expr, ...]) -> Expr:
    match e:
        case Const() | Get() | GetLocal() | SymbolValue() | ThreefryUniform():
            return e
        case Unary(op=op):
            return Unary(op, kids[0])
        case Binary(op=op):
            return Binary(op, kids[0], kids[1])
        case Ternary(op=op):
            return Ternary(op, kids[0], kids[1], kids[2])
        case _:
            assert_never(e)


def map_expr(e: Expr, rule: ExprRule) -> Expr:
    """`e` rebuilt bottom up: children first, then ``rule(node)`` replaces the rebuilt node
    where it is not None (a replacement is not walked again). Unchanged nodes are kept.

    Example: ``map_expr(e, lambda x: Const(0.0) if isinstance(x, Get) else None)``.
    """
    match e:  # (the most frequent nodes first: the cases are disjoint)
        case Binary(op=op, lhs=a, rhs=b):
            a2, b2 = map_expr(a, rule), map_expr(b, rule)
            node: Expr = e if a2 is a and b2 is b else Binary(op, a2, b2)
        case Get() | Const() | GetLocal() | SymbolValue() | ThreefryUniform():
            node = e
        case Unary(op=op, arg=a):
            a2 = map_expr(a, rule)
            node = e if a2 is a else Unary(op, a2)
        case Ternary(op=op, a=a, b=b, c=c):
            a2, b2, c2 = map_expr(a, rule), map_expr(b, rule), map_expr(c, rule)
            node = e if a2 is a and b2 is b and c2 is c else Ternary(op, a2, b2, c2)
        case _:
            assert_never(e)
    out = rule(node)
    return node if out is None else out


def fold_expr(e: Expr, rule: Callable[[Expr, list[T]], T]) -> T:
    """``rule(node, [fold of each child])``, bottom up, children left to right.

    Example: ``fold_expr(e, lambda x, kids: 1 + sum(kids))`` counts the nodes.
    """
    return rule(e, [fold_expr(k, rule) for k in expr_children(e)])


def expr_nodes(e: Expr) -> Iterator[Expr]:
    """Every node of `e`, in pre-order."""
    return iter(_expr_list(e, []))


def _expr_list(e: Expr, out: list[Expr]) -> list[Expr]:
    """`out` with every node of `e` appended, in pre-order (no generator per level)."""
    stack = [e]
    while stack:
        x = stack.pop()
        out.append(x)
        match x:
            case Const() | Get() | GetLocal() | SymbolValue() | ThreefryUniform():
                pass
            case Unary(arg=a):
                stack.append(a)
            case Binary(lhs=a, rhs=b):
                stack += (b, a)
            case Ternary(a=a, b=b, c=c):
                stack += (c, b, a)
            case _:
                assert_never(x)
    return out


def _expr_gets(e: Expr, out: list[Get]) -> None:
    """Append the buffer reads of `e` to `out`, left to right."""
    match e:  # (the most frequent nodes first: the cases are disjoint)
        case Get():
            out.append(e)
        case Binary(lhs=a, rhs=b):
            _expr_gets(a, out)
            _expr_gets(b, out)
        case Const() | GetLocal() | SymbolValue() | ThreefryUniform():
            pass
        case Unary(arg=a):
            _expr_gets(a, out)
        case Ternary(a=a, b=b, c=c):
            _expr_gets(a, out)
            _expr_gets(b, out)
            _expr_gets(c, out)
        case _:
            assert_never(e)


def gets(e: Expr) -> Iterator[Get]:
    """The buffer reads of `e`, left to right."""
    out: list[Get] = []
    _expr_gets(e, out)
    return iter(out)


def local_names(e: Expr) -> set[str]:
    """The scalar locals `e` reads."""
    return {x.name for x in _expr_list(e, []) if isinstance(x, GetLocal)}


def subst_index(ix: IndexExpr, sub: Mapping[Symbol, IndexExpr]) -> IndexExpr:
    """`ix` with each symbol of `sub` replaced by its affine index (like terms merged)."""
    if not ix.terms:
        return ix
    if len(ix.terms) == 1:
        c, sym = ix.terms[0]
        rep = sub.get(sym)
        if rep is None:
            if c != 0:
                return ix  # nothing to replace or merge (the common case: kept as it is)
        elif len(rep.terms) == 1 and c * rep.terms[0][0] != 0:  # renamed or scaled
            return IndexExpr(((c * rep.terms[0][0], rep.terms[0][1]),), ix.offset + c * rep.offset)
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
    return IndexExpr(tuple([(c, s) for s, c in terms.items() if c != 0]), offset)


def subst_expr(e: Expr, sub: Mapping[Symbol, IndexExpr]) -> Expr:
    """`e` with the symbols of `sub` replaced in its indices and counters; a symbol read as a
    number must be replaced by a plain symbol (ValueError otherwise)."""
    def rule(x: Expr) -> Expr | None:
        match x:
            case Get(buffer=b, index=index):
                new = tuple([subst_index(ix, sub) for ix in index])
                for a, z in zip(index, new, strict=True):
                    if a is not z:
                        return Get(b, new)
                return None  # unchanged: the node is kept
            case ThreefryUniform(key=k, counter=c):
                c2 = subst_index(c, sub)
                return None if c2 is c else ThreefryUniform(k, c2)
            case SymbolValue(symbol=s) if s in sub:
                rep = sub[s]
                if rep.offset != 0 or len(rep.terms) != 1 or rep.terms[0][0] != 1:
                    raise ValueError(f"{s.name} read as a number cannot become {rep}")
                return SymbolValue(rep.terms[0][1])
            case _:
                return None
    return map_expr(e, rule)


# ---- statements ----------------------------------------------------------------------


def stmt_children(s: Stmt) -> tuple[Stmt, ...]:
    """The statements directly nested in `s`."""
    match s:
        case Seq(stmts=stmts):
            return stmts
        case ForLoop(body=body):
            return (body,)
        case (Noop() | Comment() | SetCell() | DeclLocal() | SetLocal() | Fill() | CheckIndex()
              | SetFromVec()):
            return ()
        case _:
            assert_never(s)


def own_exprs(s: Stmt) -> tuple[Expr, ...]:
    """The expressions `s` holds itself (not those of nested statements)."""
    match s:
        case SetCell(value=v) | DeclLocal(init=v) | SetLocal(value=v) | SetFromVec(value=v):
            return (v,)
        case Noop() | Comment() | Seq() | ForLoop() | Fill() | CheckIndex():
            return ()
        case _:
            assert_never(s)


def map_stmt(s: Stmt, expr: ExprRule | None = None, stmt: StmtRule | None = None) -> Stmt:
    """`s` rebuilt bottom up: nested statements first, every expression through
    ``map_expr(_, expr)``, then ``stmt(node)`` replaces the rebuilt statement where it is not
    None. Unchanged nodes are kept. Example: ``map_stmt(s, expr=fold_rule)``."""
    match s:
        case Seq(stmts=stmts):
            new = [map_stmt(x, expr, stmt) for x in stmts]
            node: Stmt = Seq(tuple(new)) if any(map(is_not, stmts, new)) else s
        case ForLoop(symbol=sym, extent=n, body=body, threads=th):
            inner = map_stmt(body, expr, stmt)
            node = s if inner is body else ForLoop(sym, n, inner, th)
        case SetCell(buffer=b, index=ix, value=v) if expr is not None:
            node = s if (v2 := map_expr(v, expr)) is v else SetCell(b, ix, v2)
        case DeclLocal(name=n, init=v) if expr is not None:
            node = s if (v2 := map_expr(v, expr)) is v else DeclLocal(n, v2)
        case SetLocal(name=n, value=v) if expr is not None:
            node = s if (v2 := map_expr(v, expr)) is v else SetLocal(n, v2)
        case SetFromVec(buffer=b, vector=vec, op=op, value=v, length=n) if expr is not None:
            node = s if (v2 := map_expr(v, expr)) is v else SetFromVec(b, vec, op, v2, n)
        case (Noop() | Comment() | Fill() | CheckIndex() | SetCell() | DeclLocal() | SetLocal()
              | SetFromVec()):
            node = s  # (no expression of its own, or no rule for expressions)
        case _:
            assert_never(s)
    out = None if stmt is None else stmt(node)
    return node if out is None else out


def walk_stmts(s: Stmt, ctx: C, enter: Callable[[Stmt, C], C]) -> Iterator[tuple[Stmt, C]]:
    """Every statement in pre-order with the context it is in; ``enter(stmt, ctx)`` gives
    the context of its children (read after the consumer has seen `stmt`, which may update
    a mutable `ctx` for the siblings after it). Example: ``walk_stmts(body, 0, depth)``."""
    stack: list[tuple[Stmt, C]] = [(s, ctx)]
    while stack:
        x, c = stack.pop()
        yield x, c
        kids = stmt_children(x)
        if kids:
            inner = enter(x, c)
            stack += [(k, inner) for k in reversed(kids)]


@unit_memo.memoized
def _stmt_list(s: Stmt) -> tuple[Stmt, ...]:
    """Every statement of `s`, in pre-order."""
    out: list[Stmt] = []
    stack = [s]
    while stack:
        x = stack.pop()
        out.append(x)
        match x:
            case Seq(stmts=stmts):
                stack += stmts[::-1]
            case ForLoop(body=body):
                stack.append(body)
            case (Noop() | Comment() | SetCell() | DeclLocal() | SetLocal() | Fill()
                  | CheckIndex() | SetFromVec()):
                pass
            case _:
                assert_never(x)
    return tuple(out)


def stmt_nodes(s: Stmt) -> Iterator[Stmt]:
    """Every statement of `s`, in pre-order."""
    return iter(_stmt_list(s))


@unit_memo.memoized
def _scoped_list(s: Stmt) -> tuple[tuple[Stmt, tuple[Loop, ...]], ...]:
    out: list[tuple[Stmt, tuple[Loop, ...]]] = []
    stack: list[tuple[Stmt, tuple[Loop, ...]]] = [(s, ())]
    while stack:
        x, loops = stack.pop()
        out.append((x, loops))
        match x:
            case Seq(stmts=stmts):
                stack += [(k, loops) for k in reversed(stmts)]
            case ForLoop(symbol=sym, extent=n, body=body):
                stack.append((body, (*loops, (sym, n))))
            case (Noop() | Comment() | SetCell() | DeclLocal() | SetLocal() | Fill()
                  | CheckIndex() | SetFromVec()):
                pass
            case _:
                assert_never(x)
    return tuple(out)


def scoped(s: Stmt) -> Iterator[tuple[Stmt, tuple[Loop, ...]]]:
    """Every statement of `s` in pre-order, with the loops enclosing it (outermost first)."""
    return iter(_scoped_list(s))


def _stmt_gets(s: Stmt, out: list[Get]) -> list[Get]:
    for x in _stmt_list(s):
        match x:
            case SetCell(value=v) | DeclLocal(init=v) | SetLocal(value=v) | SetFromVec(value=v):
                _expr_gets(v, out)
            case Noop() | Comment() | Seq() | ForLoop() | Fill() | CheckIndex():
                pass
            case _:
                assert_never(x)
    return out


def stmt_gets(s: Stmt) -> Iterator[Get]:
    """Every buffer read in `s` and its nested statements, in program order."""
    return iter(_stmt_gets(s, []))


def own_symbols(s: Stmt) -> Iterator[Symbol]:
    """The symbols `s` itself uses in its indices and expressions (not nested statements)."""
    return iter(_own_symbols(s))


def _own_symbols(s: Stmt) -> list[Symbol]:
    match s:
        case SetCell(index=index):
            indices: list[IndexExpr] = list(index)
        case CheckIndex(index=ix) | SetFromVec(vector=ix):
            indices = [ix]
        case Noop() | Comment() | Seq() | ForLoop() | DeclLocal() | SetLocal() | Fill():
            indices = []
        case _:
            assert_never(s)
    out: list[Symbol] = []
    for e in own_exprs(s):
        for x in _expr_list(e, []):
            match x:
                case Get(index=index):
                    indices += index
                case ThreefryUniform(counter=ix):
                    indices.append(ix)
                case SymbolValue(symbol=sym):
                    out.append(sym)
                case Const() | GetLocal() | Unary() | Binary() | Ternary():
                    pass
                case _:
                    assert_never(x)
    return out + [sym for ix in indices for _, sym in ix.terms]


def free_symbols(s: Stmt) -> set[Symbol]:
    """Symbols used but not bound by an enclosing loop: the routine's static arguments."""
    out: set[Symbol] = set()
    _free(s, set(), out)
    return out


def _free(s: Stmt, bound: set[Symbol], out: set[Symbol]) -> None:
    """(`bound`: the loops around `s`, added on entering a loop and removed on leaving it)"""
    match s:
        case Seq(stmts=stmts):
            for x in stmts:
                _free(x, bound, out)
        case ForLoop(symbol=sym, body=body) if sym in bound:  # (an inner loop reusing it)
            _free(body, bound, out)
        case ForLoop(symbol=sym, body=body):
            bound.add(sym)
            _free(body, bound, out)
            bound.remove(sym)
        case (Noop() | Comment() | SetCell() | DeclLocal() | SetLocal() | Fill() | CheckIndex()
              | SetFromVec()):
            out.update([x for x in _own_symbols(s) if x not in bound])
        case _:
            assert_never(s)


def work(s: Stmt) -> int:
    """Innermost statement executions of a loop nest (a bound on its multiply-adds)."""
    return sum(_trips(loops) for x, loops in scoped(s) if not isinstance(x, (Seq, ForLoop)))


def _trips(loops: Sequence[Loop]) -> int:
    n = 1
    for _, extent in loops:
        n *= extent
    return n


def visits(s: Stmt, bid: int) -> int:
    """How many cell reads of buffer `bid` the statement performs (a read under a loop
    counts once per iteration)."""
    return sum(_trips(loops) * sum(1 for e in own_exprs(x) for g in gets(e)
                                   if g.buffer.id == bid)
               for x, loops in scoped(s))


# ---- reads and writes ----------------------------------------------------------------


def reads(s: Stmt) -> frozenset[Buffer]:
    """The buffers `s` reads."""
    return frozenset([g.buffer for g in _stmt_gets(s, [])])


def writes(s: Stmt) -> frozenset[Buffer]:
    """The buffers `s` writes."""
    return frozenset([x.buffer for x in _stmt_list(s)
                      if isinstance(x, (SetCell, Fill, SetFromVec))])


class Accesses:
    """The buffer ids of `reads` and `writes`, memoized by node identity (within
    `unit_memo.shared`, else for one pass run; `reads`/`writes` themselves are not): passes ask for the same units' accesses over and over (without the memo a deep
    MLP's step took seconds). The memo holds each node, so no id is reused while it lives.

    Example: ``acc = Accesses(); acc.write_ids(unit)``.
    """

    __slots__ = ("_memo",)

    def __init__(self) -> None:
        self._memo: unit_memo.Table = unit_memo.table("accesses")

    def _entry(self, s: Stmt) -> tuple[Stmt, frozenset[int], frozenset[int]]:
        hit = self._memo.get(id(s))
        if hit is None:  # one walk for both (not `reads` and `writes`: Buffer hashes)
            out: list[Get] = []
            w: list[int] = []
            for x in _stmt_list(s):
                match x:
                    case SetCell(buffer=b, value=v) | SetFromVec(buffer=b, value=v):
                        w.append(b.id)
                        _expr_gets(v, out)
                    case DeclLocal(init=v) | SetLocal(value=v):
                        _expr_gets(v, out)
                    case Fill(buffer=b):
                        w.append(b.id)
                    case Noop() | Comment() | Seq() | ForLoop() | CheckIndex():
                        pass
                    case _:
                        assert_never(x)
            hit = (s, frozenset([g.buffer.id for g in out]), frozenset(w))
            self._memo[id(s)] = hit
        return hit

    def reads(self, s: Stmt) -> frozenset[Buffer]:
        return reads(s)

    def writes(self, s: Stmt) -> frozenset[Buffer]:
        return writes(s)

    def read_ids(self, s: Stmt) -> frozenset[int]:  # (a hit without `_entry`'s call: hot)
        return (self._memo.get(id(s)) or self._entry(s))[1]

    def write_ids(self, s: Stmt) -> frozenset[int]:
        return (self._memo.get(id(s)) or self._entry(s))[2]
