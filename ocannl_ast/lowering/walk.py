"""The one traversal engine of the loop IR: a bottom-up map and a fold over expressions, a
map and a context-carrying walk over statements, and the queries every pass and backend
asks of a program (reads and writes, free symbols, work); loop nests are in `nests`.

Stage: shared by the loop-IR passes (`fold_constants`, `inline`, `fuse_epilogue`), the
printer, the verifier and the backends. Input and output: loop-IR nodes (`loop_ir`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TypeVar, assert_never

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
    kids = expr_children(e)
    new = tuple(map_expr(k, rule) for k in kids)
    node = e if all(a is b for a, b in zip(kids, new, strict=True)) else _with_children(e, new)
    out = rule(node)
    return node if out is None else out


def fold_expr(e: Expr, rule: Callable[[Expr, list[T]], T]) -> T:
    """``rule(node, [fold of each child])``, bottom up, children left to right.

    Example: ``fold_expr(e, lambda x, kids: 1 + sum(kids))`` counts the nodes.
    """
    return rule(e, [fold_expr(k, rule) for k in expr_children(e)])


def expr_nodes(e: Expr) -> Iterator[Expr]:
    """Every node of `e`, in pre-order."""
    yield e
    for k in expr_children(e):
        yield from expr_nodes(k)


def gets(e: Expr) -> Iterator[Get]:
    """The buffer reads of `e`, left to right."""
    return (x for x in expr_nodes(e) if isinstance(x, Get))


def local_names(e: Expr) -> set[str]:
    """The scalar locals `e` reads."""
    return {x.name for x in expr_nodes(e) if isinstance(x, GetLocal)}


def subst_index(ix: IndexExpr, sub: Mapping[Symbol, IndexExpr]) -> IndexExpr:
    """`ix` with each symbol of `sub` replaced by its affine index (like terms merged)."""
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


def subst_expr(e: Expr, sub: Mapping[Symbol, IndexExpr]) -> Expr:
    """`e` with the symbols of `sub` replaced in its indices and counters; a symbol read as a
    number must be replaced by a plain symbol (ValueError otherwise)."""
    def rule(x: Expr) -> Expr | None:
        match x:
            case Get(buffer=b, index=index):
                return Get(b, tuple(subst_index(ix, sub) for ix in index))
            case ThreefryUniform(key=k, counter=c):
                return ThreefryUniform(k, subst_index(c, sub))
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


def _map_own(s: Stmt, f: Callable[[Expr], Expr]) -> Stmt:
    match s:
        case SetCell(buffer=b, index=ix, value=v):
            return s if f(v) is v else SetCell(b, ix, f(v))
        case DeclLocal(name=n, init=v):
            return s if f(v) is v else DeclLocal(n, f(v))
        case SetLocal(name=n, value=v):
            return s if f(v) is v else SetLocal(n, f(v))
        case SetFromVec(buffer=b, vector=vec, op=op, value=v, length=n):
            return s if f(v) is v else SetFromVec(b, vec, op, f(v), n)
        case Noop() | Comment() | Seq() | ForLoop() | Fill() | CheckIndex():
            return s
        case _:
            assert_never(s)


def map_stmt(s: Stmt, expr: ExprRule | None = None, stmt: StmtRule | None = None) -> Stmt:
    """`s` rebuilt bottom up: nested statements first, every expression through
    ``map_expr(_, expr)``, then ``stmt(node)`` replaces the rebuilt statement where it is not
    None. Unchanged nodes are kept. Example: ``map_stmt(s, expr=fold_rule)``."""
    match s:
        case Seq(stmts=stmts):
            new = tuple(map_stmt(x, expr, stmt) for x in stmts)
            node: Stmt = s if all(a is b for a, b in zip(stmts, new, strict=True)) else Seq(new)
        case ForLoop(symbol=sym, extent=n, body=body, threads=th):
            inner = map_stmt(body, expr, stmt)
            node = s if inner is body else ForLoop(sym, n, inner, th)
        case (Noop() | Comment() | SetCell() | DeclLocal() | SetLocal() | Fill() | CheckIndex()
              | SetFromVec()):
            node = s if expr is None else _map_own(s, lambda e: map_expr(e, expr))
        case _:
            assert_never(s)
    out = None if stmt is None else stmt(node)
    return node if out is None else out


def walk_stmts(s: Stmt, ctx: C, enter: Callable[[Stmt, C], C]) -> Iterator[tuple[Stmt, C]]:
    """Every statement in pre-order with the context it is in; ``enter(stmt, ctx)`` gives
    the context of its children (read after the consumer has seen `stmt`, which may update
    a mutable `ctx` for the siblings after it). Example: ``walk_stmts(body, 0, depth)``."""
    yield s, ctx
    kids = stmt_children(s)
    if kids:
        inner = enter(s, ctx)
        for k in kids:
            yield from walk_stmts(k, inner, enter)


def stmt_nodes(s: Stmt) -> Iterator[Stmt]:
    """Every statement of `s`, in pre-order."""
    return (x for x, _ in walk_stmts(s, None, lambda _s, c: c))


def _enter_loop(s: Stmt, loops: tuple[Loop, ...]) -> tuple[Loop, ...]:
    return (*loops, (s.symbol, s.extent)) if isinstance(s, ForLoop) else loops


def scoped(s: Stmt) -> Iterator[tuple[Stmt, tuple[Loop, ...]]]:
    """Every statement of `s` in pre-order, with the loops enclosing it (outermost first)."""
    return walk_stmts(s, (), _enter_loop)


def stmt_gets(s: Stmt) -> Iterator[Get]:
    """Every buffer read in `s` and its nested statements, in program order."""
    return (g for x in stmt_nodes(s) for e in own_exprs(x) for g in gets(e))


def own_symbols(s: Stmt) -> Iterator[Symbol]:
    """The symbols `s` itself uses in its indices and expressions (not nested statements)."""
    match s:
        case SetCell(index=index):
            indices: tuple[IndexExpr, ...] = index
        case CheckIndex(index=ix) | SetFromVec(vector=ix):
            indices = (ix,)
        case Noop() | Comment() | Seq() | ForLoop() | DeclLocal() | SetLocal() | Fill():
            indices = ()
        case _:
            assert_never(s)
    for e in own_exprs(s):
        for x in expr_nodes(e):
            match x:
                case Get(index=index):
                    indices += index
                case ThreefryUniform(counter=ix):
                    indices += (ix,)
                case SymbolValue(symbol=sym):
                    yield sym
                case Const() | GetLocal() | Unary() | Binary() | Ternary():
                    pass
                case _:
                    assert_never(x)
    yield from (sym for ix in indices for _, sym in ix.terms)


def free_symbols(s: Stmt) -> set[Symbol]:
    """Symbols used but not bound by an enclosing loop: the routine's static arguments."""
    return {sym for x, loops in scoped(s) for sym in own_symbols(x)
            if sym not in {b for b, _ in loops}}


def work(s: Stmt) -> int:
    """Innermost statement executions of a loop nest (a bound on its multiply-adds)."""
    return sum(_trips(loops) for x, loops in scoped(s) if not isinstance(x, Seq | ForLoop))


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
    return frozenset(g.buffer for g in stmt_gets(s))


def writes(s: Stmt) -> frozenset[Buffer]:
    """The buffers `s` writes."""
    return frozenset(x.buffer for x in stmt_nodes(s) if isinstance(x, SetCell | Fill | SetFromVec))


class Accesses:
    """`reads` and `writes` (and their buffer ids) memoized by node identity, for one pass
    run: passes ask for the same units' accesses over and over (without the memo a deep
    MLP's step took seconds). The memo holds each node, so no id is reused while it lives.

    Example: ``acc = Accesses(); acc.write_ids(unit)``.
    """

    __slots__ = ("_memo",)

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Stmt, frozenset[Buffer], frozenset[Buffer],
                                    frozenset[int], frozenset[int]]] = {}

    def _entry(self, s: Stmt) -> tuple[Stmt, frozenset[Buffer], frozenset[Buffer],
                                       frozenset[int], frozenset[int]]:
        hit = self._memo.get(id(s))
        if hit is None:
            r, w = reads(s), writes(s)
            hit = (s, r, w, frozenset(b.id for b in r), frozenset(b.id for b in w))
            self._memo[id(s)] = hit
        return hit

    def reads(self, s: Stmt) -> frozenset[Buffer]:
        return self._entry(s)[1]

    def writes(self, s: Stmt) -> frozenset[Buffer]:
        return self._entry(s)[2]

    def read_ids(self, s: Stmt) -> frozenset[int]:
        return self._entry(s)[3]

    def write_ids(self, s: Stmt) -> frozenset[int]:
        return self._entry(s)[4]
