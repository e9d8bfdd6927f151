"""The free symbols of a loop program: the symbols its indices and expressions use that no
enclosing loop binds (stage: `bind_statics`, after the last loop-IR pass; they become the
routine's static arguments).

The same answer as `walk.free_symbols`, in one walk that keys symbols by `(id, name)`
tuples (hashed in C) rather than by `Symbol` (a Python-level `__hash__` per lookup), and
reads each statement's indices and expressions in place, building no per-statement lists.

Input: a statement (a program's body). Output: its free symbols.
"""

from __future__ import annotations

from typing import assert_never

from .loop_ir import (
    Binary,
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

Key = tuple[int, str]  #: a symbol's identity for equality: its id and name


class _Free:
    """The walk's state: the loops around the statement being read, what was found."""

    __slots__ = ("bound", "found")

    def __init__(self) -> None:
        self.bound: set[Key] = set()
        self.found: dict[Key, Symbol] = {}

    def index(self, ix: IndexExpr) -> None:
        bound, found = self.bound, self.found
        for _, sym in ix.terms:
            key = (sym.id, sym.name)
            if key not in bound and key not in found:
                found[key] = sym

    def expr(self, e: Expr) -> None:
        bound, found = self.bound, self.found
        stack = [e]
        while stack:
            x = stack.pop()
            match x:  # (the most frequent nodes first: the cases are disjoint)
                case Get(index=index):
                    for ix in index:  # (`index`, inlined: hot)
                        for _, sym in ix.terms:
                            key = (sym.id, sym.name)
                            if key not in bound and key not in found:
                                found[key] = sym
                case Binary(lhs=a, rhs=b):
                    stack += (b, a)
                case Const() | GetLocal():
                    pass
                case Unary(arg=a):
                    stack.append(a)
                case Ternary(a=a, b=b, c=c):
                    stack += (c, b, a)
                case SymbolValue(symbol=sym):
                    key = (sym.id, sym.name)
                    if key not in bound and key not in found:
                        found[key] = sym
                case ThreefryUniform(counter=ix):
                    self.index(ix)
                case _:
                    assert_never(x)

    def stmt(self, s: Stmt) -> None:
        match s:
            case Seq(stmts=stmts):
                for x in stmts:
                    self.stmt(x)
            case ForLoop(symbol=sym, body=body):
                key = (sym.id, sym.name)
                if key in self.bound:  # (an inner loop reusing it)
                    self.stmt(body)
                else:
                    self.bound.add(key)
                    self.stmt(body)
                    self.bound.remove(key)
            case SetCell(index=index, value=v):
                for ix in index:
                    self.index(ix)
                self.expr(v)
            case DeclLocal(init=v) | SetLocal(value=v):
                self.expr(v)
            case SetFromVec(vector=ix, value=v):
                self.index(ix)
                self.expr(v)
            case CheckIndex(index=ix):
                self.index(ix)
            case Noop() | Comment() | Fill():
                pass
            case _:
                assert_never(s)


def free_symbols(s: Stmt) -> list[Symbol]:
    """Symbols used but not bound by an enclosing loop (each once), in the order first met.

    Example: ``free_symbols(SetCell(b, (IndexExpr(((1, n),)),), Const(0.0)))`` is ``[n]``.
    """
    walk = _Free()
    walk.stmt(s)
    return list(walk.found.values())
