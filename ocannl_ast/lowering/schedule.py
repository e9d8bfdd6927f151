"""Scheduling passes that change the order of a loop nest's arithmetic only where every cell
still gets the same operations in the same order (so the same bits): unrolling small
reductions into straight-line code, and interchanging the loops of an injective pointwise
nest so that its innermost loop walks the written buffer contiguously.

Why: a reduction over a 2x2 pooling window, or a nest whose innermost loop strides across a
pooling window, keeps the innermost loop short or strided and gcc leaves it scalar; after
these passes the innermost loop is the long unit-stride one and vectorizes.

Stage: loop-IR passes (`unroll_reductions` before `inline`, `interchange` after
`fuse_epilogue`). Input: a `LoopProgram`. Output: the program, and the notes of what each
decided (as leading comments, like the virtualization passes).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence

from ..records import record
from . import unit_memo
from .loop_ir import (
    MAX_UNROLL,
    Binary,
    BinOp,
    Buffer,
    DeclLocal,
    Expr,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Seq,
    SetCell,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
)
from .nests import ReductionNest, body_units, flat_terms, match_reduction, nest, noted, peel
from .walk import (
    Loop,
    expr_nodes,
    gets,
    map_expr,
    scoped,
    stmt_nodes,
    subst_expr,
    subst_index,
)

#: `loop_ir.MAX_UNROLL`: reductions of at most this many terms per cell are unrolled (a
#: pooling window, a tiny row): their loops are too short for gcc to vectorize, the cells
#: around them are not


@record
class Scheduled:
    """A scheduling pass's program, and how many nests it changed."""

    prog: LoopProgram
    changed: int


# ---- unrolling small reductions -------------------------------------------------------


def unroll_reductions(prog: LoopProgram, max_terms: int = MAX_UNROLL) -> Scheduled:
    """Unroll every reduction nest of at most `max_terms` terms per cell, inside at least
    one loop, that is not a sum of products (those are the contraction kernels' to take):
    the accumulator's steps in the same order, as one expression when the accumulator is
    read once per step.

    Example: ``unroll_reductions(prog).changed``.
    """
    notes, rest = body_units(prog)
    out: list[Stmt] = []
    changed = 0
    for u in rest:
        red = match_reduction(u)
        new = _unrolled(red, max_terms) if red is not None else None
        out.append(u if new is None else new)
        changed += new is not None
    more = [f"unrolled: {changed} small reduction{'s' if changed != 1 else ''}"] \
        if changed else []
    return Scheduled(noted(prog, notes, more, out, frozenset()), changed)


def _unrolled(red: ReductionNest, max_terms: int) -> Stmt | None:
    terms = math.prod(n for _, n in red.reduce)
    if not red.outer or terms > max_terms or sum_of_products(red):
        return None  # (no loop around it: nothing for straight-line code to vectorize)
    reduce_syms = {s for s, _ in red.reduce}
    if any(isinstance(x, SymbolValue) and x.symbol in reduce_syms
           for e in (red.step, red.store.value) for x in expr_nodes(e)):
        return None  # a reduction symbol read as a number: keep the loop
    if any(sym in reduce_syms for ix in red.store.index for _, sym in ix.terms):
        return None
    steps = [subst_expr(red.step, {s: IndexExpr((), k) for (s, _), k in
                                   zip(red.reduce, point, strict=True)})
             for point in itertools.product(*(range(n) for _, n in red.reduce))]
    if _reads(red.step, red.acc) == 1 and _reads(red.store.value, red.acc) <= 1:
        value = red.init
        for step in steps:
            value = _put(step, red.acc, value)
        store = SetCell(red.store.buffer, red.store.index, _put(red.store.value, red.acc, value))
        return nest(red.outer, store)
    body = Seq((DeclLocal(red.acc, red.init), *(SetLocal(red.acc, s) for s in steps),
                red.store))
    return nest(red.outer, body)


def sum_of_products(red: ReductionNest) -> bool:
    """``acc + x * y`` (either side): a contraction the backend may run as a kernel."""
    s = red.step
    if not isinstance(s, Binary) or s.op is not BinOp.ADD:
        return False
    other = s.rhs if s.lhs == GetLocal(red.acc) else s.lhs if s.rhs == GetLocal(red.acc) \
        else None
    return isinstance(other, Binary) and other.op is BinOp.MUL


def accumulates_product(c: SetCell) -> bool:
    """``c[i] = c[i] + x * y`` (either side): the other shape the contraction kernels take."""
    v = c.value
    if not isinstance(v, Binary) or v.op is not BinOp.ADD:
        return False  # (the common case: no read of the cell is built to compare)
    own = Get(c.buffer, c.index)
    return any(a == own and isinstance(b, Binary) and b.op is BinOp.MUL
               for a, b in ((v.lhs, v.rhs), (v.rhs, v.lhs)))


def summed_product(c: SetCell, loops: Sequence[Loop]) -> bool:
    """`accumulates_product` inside some of `loops` that `c` does not index: those loops
    are summed, so a contraction kernel may take it (one indexed by every loop around it
    is pointwise: no kernel has a reduction group to take)."""
    if not accumulates_product(c):
        return False
    used = flat_terms(c.buffer.dims, c.index)[0]
    return any(used.get(sym, 0) == 0 for sym, n in loops if n > 1)


def holds_contraction(u: Stmt) -> bool:
    """Whether a contraction kernel could take some loop of `u` (a sum of products into a
    local, or a summed accumulating product): a pass that hides or wraps it must leave it.
    (Not memoized: row fusion asks it once of each unit.)"""
    # a reduction nest declares its local, a summed product accumulates: without either,
    # no loop is asked (the common case: one walk over the statements, none over scopes)
    locals_ = adds = False
    for x in stmt_nodes(u):
        if isinstance(x, DeclLocal):
            locals_ = True
        elif isinstance(x, SetCell) and accumulates_product(x):
            adds = True
    if not (locals_ or adds):
        return False
    for x, loops in scoped(u):
        if locals_ and isinstance(x, ForLoop):
            red = match_reduction(x)
            if red is not None and sum_of_products(red):
                return True
        if isinstance(x, SetCell) and summed_product(x, loops):
            return True
    return False


def _reads(e: Expr, name: str) -> int:
    return sum(1 for x in expr_nodes(e) if isinstance(x, GetLocal) and x.name == name)


def _put(e: Expr, name: str, value: Expr) -> Expr:
    """`e` with the local `name` replaced by `value`."""
    return map_expr(e, lambda x: value if isinstance(x, GetLocal) and x.name == name else None)


# ---- loop interchange ------------------------------------------------------------------


def interchange(prog: LoopProgram) -> Scheduled:
    """Reorder the loops of each perfect nest ``for ...: buf[f(i)] = value`` that writes
    each cell once (f injective) and reads `buf` only at the written cell, so that the
    written buffer's strides decrease inward (the unit stride innermost). Iterations are
    independent, so every cell gets the same value in any order.

    Example: ``interchange(prog).changed``.
    """
    notes, rest = body_units(prog)
    out: list[Stmt] = []
    changed = 0
    for u in rest:
        new = _interchanged(u)
        out.append(u if new is None else new)
        changed += new is not None
    more = [f"interchanged: {changed} loop nest{'s' if changed != 1 else ''}"] \
        if changed else []
    return Scheduled(noted(prog, notes, more, out, frozenset()), changed)


def _interchanged(u: Stmt) -> Stmt | None:
    loops, body = peel(u)
    if len(loops) < 2 or not isinstance(body, SetCell) or body.buffer.uint4x32:
        return None
    strides, _ = flat_terms(body.buffer.dims, body.index)
    order = sorted(loops, key=lambda lp: -abs(strides.get(lp[0], 0)))
    if order == loops or not independent(loops, [body]):
        return None  # (the order first: most nests are in it, and it is the cheaper test)
    return nest(order, body)


def injective(loops: Sequence[Loop], buf: Buffer, index: Sequence[IndexExpr]) -> bool:
    """Whether ``buf[index]`` names a different cell at each iteration of `loops` (a
    mixed-radix test on the row-major strides: each stride exceeds the reach of the smaller
    ones)."""
    strides, _ = flat_terms(buf.dims, index)
    bound = {s for s, _ in loops}
    if any(s not in bound for s, c in strides.items() if c != 0):
        return False
    reach = 0
    for sym, n in sorted(loops, key=lambda lp: abs(strides.get(lp[0], 0))):
        if n == 1:
            continue
        c = abs(strides.get(sym, 0))
        if c <= reach:
            return False
        reach += c * (n - 1)
    return True


def cell_injective(loops: Sequence[Loop], cell: SetCell) -> bool:
    """`injective(loops, cell.buffer, cell.index)`, memoized within `unit_memo.shared` by the
    write and its loops' symbols (ids: distinct symbols of a program have distinct ids): the
    fusion passes ask it again of every write of a nest each time it grows."""
    memo = unit_memo.table("cell_injective")
    key = (id(cell), *[(s.id, n) for s, n in loops])
    hit = memo.get(key)
    if hit is None:
        hit = memo[key] = (cell, injective(loops, cell.buffer, cell.index))
    return hit[1]  # type: ignore[no-any-return]


def same_cell(buf: Buffer, a: Sequence[IndexExpr], b: Sequence[IndexExpr]) -> bool:
    """Whether two indices of `buf` name the same cell for every value of their symbols."""
    return a == b or _flat(buf.dims, tuple(a)) == _flat(buf.dims, tuple(b))


@functools.lru_cache(maxsize=1 << 16)
def _flat(dims: tuple[int, ...], index: tuple[IndexExpr, ...]
          ) -> tuple[frozenset[tuple[Symbol, int]], int]:
    """The row-major flat offset of `index` (nonzero coefficients only), memoized: the
    passes ask for the same accesses' offsets over and over."""
    terms, offset = flat_terms(dims, index)
    return frozenset((s, c) for s, c in terms.items() if c), offset


def independent(loops: Sequence[Loop], cells: Sequence[SetCell]) -> bool:
    """Whether iterations of `loops` around the statements `cells` (run in order each
    iteration) are independent: each written buffer is written at one injective index and
    read (by any of them) only there."""
    written: dict[int, SetCell] = {}
    for c in cells:
        if c.buffer.uint4x32 or not cell_injective(loops, c):
            return False
        first = written.setdefault(c.buffer.id, c)
        if not same_cell(c.buffer, first.index, c.index):
            return False
    return all(same_cell(g.buffer, written[g.buffer.id].index, g.index)
               for c in cells for g in gets(c.value) if g.buffer.id in written)


def rename(cell: SetCell, sub: dict[Symbol, IndexExpr]) -> SetCell:
    """`cell` with its symbols renamed by `sub` (indices and value)."""
    return SetCell(cell.buffer, tuple(subst_index(ix, sub) for ix in cell.index),
                   subst_expr(cell.value, sub))


__all__ = [
    "MAX_UNROLL",
    "Scheduled",
    "accumulates_product",
    "cell_injective",
    "holds_contraction",
    "independent",
    "injective",
    "interchange",
    "rename",
    "same_cell",
    "sum_of_products",
    "summed_product",
    "unroll_reductions",
]
