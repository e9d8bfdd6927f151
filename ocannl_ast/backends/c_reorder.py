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
from typing import Protocol

from ocannl_ast import config
from ocannl_ast.backends import c_coalesce, c_lanes
from ocannl_ast.backends.c_syntax import CSyntax, Word
from ocannl_ast.lowering.loop_ir import (
    Buffer,
    Expr,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    SetCell,
    Stmt,
    Symbol,
    index_of,
)
from ocannl_ast.lowering.nests import ReductionNest, flat_terms, match_reduction
from ocannl_ast.lowering.walk import Loop, gets, local_names, map_expr

#: Largest local accumulator array (cells), kept on the stack.
MAX_CELLS = 4096
#: Smallest number of output cells (independent accumulators) worth the reordering.
MIN_CELLS = 2
#: Shortest reduction (iterations per cell) worth it: a shorter fold is no latency chain.
MIN_REDUCE = 8


class Renderer(Protocol):
    """What the reordering hook needs of `c_renderer.CRenderer`."""

    prog: LoopProgram
    syntax: CSyntax
    words: dict[str, str]
    buffers: dict[Buffer, str]
    symbols: dict[Symbol, str]
    n_iters: int
    absorbed: set[Symbol]

    def stmt(self, s: Stmt, depth: int, out: list[str]) -> None: ...
    def fresh(self, stem: str) -> str: ...


def enabled() -> bool:
    """``$OCANNL_AST_REORDER``: on unless it is ``0``."""
    return config.reorder()


def _flat_coeff(g: Get, sym: Symbol) -> int:
    return flat_terms(g.buffer.dims, g.index)[0].get(sym, 0)


def admissible(red: ReductionNest, lanes: bool = False) -> bool:
    """Whether reordering `red` keeps every result's bits and likely pays (see module);
    `lanes`: whether its innermost loop would otherwise be summed in lanes (`c_lanes`),
    then never (that order is the one every path must give)."""
    if lanes and c_lanes.takes(*red.reduce[-1], red.acc, red.step):
        return False
    cells = math.prod(e for _, e in red.outer)
    if not red.outer or not MIN_CELLS <= cells <= MAX_CELLS:
        return False
    if red.store.buffer.uint4x32 or math.prod(e for _, e in red.reduce) < MIN_REDUCE:
        return False
    init_gets, step_gets = list(gets(red.init)), list(gets(red.step))
    if local_names(red.init) or not local_names(red.step) <= {red.acc} or \
            not local_names(red.store.value) <= {red.acc}:
        return False
    if any(g.buffer == red.store.buffer or g.buffer.uint4x32 for g in (*init_gets, *step_gets)):
        return False
    inner = red.outer[-1][0]
    return all(_flat_coeff(g, inner) in (0, 1) for g in step_gets)


def _subst(e: Expr, name: str, by: Expr) -> Expr:
    """`e` with every ``GetLocal(name)`` replaced by `by`."""
    return map_expr(e, lambda x: by if x.__class__ is GetLocal and x.name == name  # type: ignore[union-attr]
                    else None)


def _unique(r: Renderer, stem: str) -> str:
    return r.fresh(stem)


def _nest(r: Renderer, loops: tuple[Loop, ...], cell: SetCell, depth: int,
          out: list[str]) -> None:
    """``for loops: cell`` rendered directly (no hooks: the loop order is the point), the
    loops that may run as one coalesced (`c_coalesce.nest`)."""
    c_coalesce.nest(r, loops, cell, depth, out)


def render(r: Renderer, loop: ForLoop, depth: int, out: list[str], lanes: bool = False
           ) -> bool:
    """Append the reordered form of `loop`, if it is an admissible reduction (`lanes`: as
    in `admissible`); else False."""
    red = match_reduction(loop)
    if red is None or not admissible(red, lanes):
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
    store = SetCell(red.store.buffer, red.store.index, _subst(red.store.value, red.acc, acc))
    _nest(r, red.outer, store, depth + 1, out)
    out.append(pad + "}")
    return True
