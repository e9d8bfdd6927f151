"""Reduction reordering for the C backend: hoist the reduction loops of a small
``for out: { acc = init; for red: acc = f(acc, ..); c[..] = g(acc) }`` nest outside its
output loops, accumulating into a stack array, so that the innermost loop runs over an
output axis (independent cells: it vectorizes) instead of an in-order scalar fold.

Stage: rendering (hooked into `c_renderer.CRenderer.for_loop`, after the contraction
kernels). Input: a `ForLoop` of a verified `LoopProgram`. Output: C text

    { T L[n]; for out: L[o] = init; for red: for out: L[o] = f(L[o], ..);
      for out: c[..] = g(L[o]); }

Every output cell sees the same operations on the same values in the same order (red = 0,
1, 2, ...), so the results are bit-identical to the scalar fold under strict FP. Refused
(old loops kept) unless: the nest has exactly that form; the local array has `MIN_CELLS`
.. `MAX_CELLS` cells; the reduction runs at least `MIN_REDUCE` iterations; neither `init`
nor `f` reads the stored buffer nor any scalar local other than `acc`; every read in `f`
steps by 0 or 1 element along the innermost output loop. ``OCANNL_AST_REORDER=0`` turns it
off; so does a dialect without `reorder_loops` (CUDA: one thread per cell).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, replace
from typing import Protocol, assert_never

from ocannl_ast.backends.c_syntax import CSyntax, Word
from ocannl_ast.lowering.loop_ir import (
    Binary,
    Buffer,
    Comment,
    Const,
    DeclLocal,
    Expr,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Noop,
    Seq,
    SetCell,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    ThreefryUniform,
    Unary,
    index_of,
)

#: Largest local accumulator array (cells), kept on the stack.
MAX_CELLS = 4096
#: Smallest number of output cells (independent accumulators) worth the reordering.
MIN_CELLS = 2
#: Shortest reduction (iterations per cell) worth it: a shorter fold is no latency chain.
MIN_REDUCE = 8

Loop = tuple[Symbol, int]


class Renderer(Protocol):
    """What the reordering hook needs of `c_renderer.CRenderer`."""

    prog: LoopProgram
    syntax: CSyntax
    words: dict[str, str]
    buffers: dict[Buffer, str]
    symbols: dict[Symbol, str]
    n_iters: int

    def stmt(self, s: Stmt, depth: int, out: list[str]) -> None: ...


def enabled() -> bool:
    """``$OCANNL_AST_REORDER``: on unless it is ``0``."""
    return os.environ.get("OCANNL_AST_REORDER", "1").strip() != "0"


@dataclass(frozen=True, slots=True)
class Reduction:
    """``for outer: { acc = init; for reduce: acc = step; store(acc) }``."""

    outer: tuple[Loop, ...]
    reduce: tuple[Loop, ...]
    acc: str
    init: Expr
    step: Expr  #: the new value of `acc` (reads `GetLocal(acc)`)
    store: SetCell  #: reads `GetLocal(acc)`


def _single(s: Stmt) -> Stmt:
    if isinstance(s, Seq):
        subs = [x for x in s.stmts if not isinstance(x, Noop | Comment)]
        if len(subs) == 1:
            return _single(subs[0])
    return s


def _peel(s: Stmt) -> tuple[list[Loop], Stmt]:
    loops: list[Loop] = []
    s = _single(s)
    while isinstance(s, ForLoop):
        loops.append((s.symbol, s.extent))
        s = _single(s.body)
    return loops, s


def match(loop: ForLoop) -> Reduction | None:
    """The reduction nest `loop` is, or None (see the module docstring for the form)."""
    outer, body = _peel(loop)
    if not isinstance(body, Seq):
        return None
    subs = [x for x in body.stmts if not isinstance(x, Noop | Comment)]
    if len(subs) != 3 or not isinstance(subs[0], DeclLocal) or not isinstance(subs[1], ForLoop):
        return None
    decl, store = subs[0], subs[2]
    red, inner = _peel(subs[1])
    if not isinstance(store, SetCell) or not isinstance(inner, SetLocal):
        return None
    if inner.name != decl.name or not red:
        return None
    syms = [s for s, _ in (*outer, *red)]
    if len(set(syms)) != len(syms):
        return None
    return Reduction(tuple(outer), tuple(red), decl.name, decl.init, inner.value, store)


def _reads(e: Expr) -> tuple[list[Get], set[str]]:
    """The buffer reads and the scalar locals of an expression."""
    match e:
        case Get():
            return [e], set()
        case GetLocal(name=name):
            return [], {name}
        case Const() | SymbolValue() | ThreefryUniform():
            return [], set()
        case Unary(arg=arg):
            return _reads(arg)
        case Binary(lhs=lhs, rhs=rhs):
            return _merge(lhs, rhs)
        case Ternary(a=a, b=b, c=c):
            return _merge(a, b, c)
        case _:
            assert_never(e)


def _merge(*es: Expr) -> tuple[list[Get], set[str]]:
    gets: list[Get] = []
    names: set[str] = set()
    for e in es:
        g, n = _reads(e)
        gets += g
        names |= n
    return gets, names


def _flat_coeff(g: Get, sym: Symbol) -> int:
    total = 0
    for axis, e in enumerate(g.index):
        stride = math.prod(g.buffer.dims[axis + 1:])
        total += sum(c for c, s in e.terms if s == sym) * stride
    return total


def admissible(red: Reduction) -> bool:
    """Whether reordering `red` keeps every result's bits and likely pays (see module)."""
    cells = math.prod(e for _, e in red.outer)
    if not red.outer or not MIN_CELLS <= cells <= MAX_CELLS:
        return False
    if red.store.buffer.uint4x32 or math.prod(e for _, e in red.reduce) < MIN_REDUCE:
        return False
    init_gets, init_locals = _reads(red.init)
    step_gets, step_locals = _reads(red.step)
    _, store_locals = _reads(red.store.value)
    if init_locals or not step_locals <= {red.acc} or not store_locals <= {red.acc}:
        return False
    if any(g.buffer == red.store.buffer or g.buffer.uint4x32 for g in (*init_gets, *step_gets)):
        return False
    inner = red.outer[-1][0]
    return all(_flat_coeff(g, inner) in (0, 1) for g in step_gets)


def _subst(e: Expr, name: str, by: Expr) -> Expr:
    """`e` with every ``GetLocal(name)`` replaced by `by`."""
    match e:
        case GetLocal(name=n):
            return by if n == name else e
        case Get() | Const() | SymbolValue() | ThreefryUniform():
            return e
        case Unary(arg=arg):
            return replace(e, arg=_subst(arg, name, by))
        case Binary(lhs=lhs, rhs=rhs):
            return replace(e, lhs=_subst(lhs, name, by), rhs=_subst(rhs, name, by))
        case Ternary(a=a, b=b, c=c):
            return replace(e, a=_subst(a, name, by), b=_subst(b, name, by), c=_subst(c, name, by))
        case _:
            assert_never(e)


def _unique(r: Renderer, stem: str) -> str:
    taken = set(r.buffers.values()) | set(r.symbols.values())
    k = 0
    while f"{stem}{k}" in taken:
        k += 1
    return f"{stem}{k}"


def _nest(r: Renderer, loops: tuple[Loop, ...], cell: SetCell, depth: int,
          out: list[str]) -> None:
    """``for loops: cell`` rendered directly (no hooks: the loop order is the point)."""
    for level, (sym, extent) in enumerate(loops):
        if sym not in r.symbols:
            r.symbols[sym] = f"i{r.n_iters}"
            r.n_iters += 1
        out.append("  " * (depth + level) + r.syntax.for_header(r.symbols[sym], extent))
    r.stmt(cell, depth + len(loops), out)
    for level in range(len(loops) - 1, -1, -1):
        out.append("  " * (depth + level) + "}")


def render(r: Renderer, loop: ForLoop, depth: int, out: list[str]) -> bool:
    """Append the reordered form of `loop`, if it is an admissible reduction; else False."""
    red = match(loop)
    if red is None or not admissible(red):
        return False
    dims = tuple(e for _, e in red.outer)
    local = Buffer(-1 - len(r.buffers), _unique(r, "ocannl_red"), dims)
    r.buffers[local] = local.name
    index: tuple[IndexExpr, ...] = tuple(index_of(s) for s, _ in red.outer)
    acc = Get(local, index)
    pad = "  " * depth
    note = (f"reduction over {'x'.join(str(e) for _, e in red.reduce)} hoisted outside its "
            f"{'x'.join(map(str, dims))} output cells")
    out += [f"{pad}/* {note} */", pad + "{",
            f"{pad}  {r.words[Word.TYPE]} {local.name}[{math.prod(dims)}];"]
    _nest(r, red.outer, SetCell(local, index, red.init), depth + 1, out)
    step = SetCell(local, index, _subst(red.step, red.acc, acc))
    _nest(r, (*red.reduce, *red.outer), step, depth + 1, out)
    store = replace(red.store, value=_subst(red.store.value, red.acc, acc))
    _nest(r, red.outer, store, depth + 1, out)
    out.append(pad + "}")
    return True
