"""Row-wise fusion: adjacent nests sharing their outer loops (a softmax's row max, its
exponentials, their row sum and the normalization; a layer norm's mean, variance and
scaling) merge under those loops, so each row is read while it is in cache instead of once
per nest: ``for r: {max over k; for k: e = exp(..); sum over k; for k: y = e / s}``.

Merged only where the iterations of the shared loops touch disjoint cells
(`parallel.parallel_safe` of the merged nest: each written buffer written at one index,
injective over the loops around the write, and read only at that cell): each row then
sees the same operations in the same order as before, so the same bits. Sums of products
(the contraction kernels' and the reduction reordering's) are left alone.

Stage: part of the `fuse_nests` stage (`pipeline_passes.fuse_loops`), after the pointwise
fusion. Input: a `LoopProgram`. Output: the program and how many nests were merged.
"""

from __future__ import annotations

from .loop_ir import (
    DeclLocal,
    Expr,
    ForLoop,
    Get,
    IndexExpr,
    LoopProgram,
    Seq,
    SetCell,
    Stmt,
    Symbol,
    SymbolValue,
    ThreefryUniform,
)
from .nests import body_units, nest, noted, peel
from .parallel import Safety, extend_safety, safety
from .schedule import Scheduled, holds_contraction
from .walk import Loop, map_stmt, subst_expr, subst_index

#: nests merged into one row group at most
MAX_GROUP = 6


def fuse_rows(prog: LoopProgram, max_group: int = MAX_GROUP) -> Scheduled:
    """Merge each nest into the one before it under their common outer loops, where legal.

    Example: ``fuse_rows(prog).changed``.
    """
    notes, rest = body_units(prog)
    out: list[Stmt] = []
    group = 0
    changed = 0
    last_fusable = False  # whether out[-1] is `_fusable`
    last_safety: Safety | None = None  # out[-1]'s, when it is a merged nest
    for u in rest:
        fusable = _fusable(u)
        merged = _merge(out[-1], u, last_safety) if out and group < max_group and fusable \
            and last_fusable else None
        if merged is None:
            out.append(u)
            group, last_fusable, last_safety = 1, fusable, None
            continue
        # two fusable nests merged stay fusable (a loop; under the common loops no statement
        # becomes a sum of products: each keeps its own loops), so it is not checked again
        out[-1], last_safety = merged
        group += 1
        changed += 1
    plural = "s" if changed != 1 else ""
    more = [f"row-fused: {changed} nest{plural} into the one before"] if changed else []
    return Scheduled(noted(prog, notes, more, out, frozenset()), changed)


def _fusable(u: Stmt) -> bool:
    """A loop nest that holds no sum of products (the kernels' and the reordering's)."""
    return isinstance(u, ForLoop) and not holds_contraction(u)


def _merge(a: Stmt, b: Stmt, known: Safety | None) -> tuple[Stmt, Safety] | None:
    """`a` and `b` under their common outer loops (`b`'s renamed), if that is legal and
    leaves something inside them (equal perfect nests are `fuse_nests`' to merge); and the
    merged nest's `parallel.Safety` (`known`: `a`'s, when `a` is a merged nest)."""
    la, body_a = peel(a)
    lb, body_b = peel(b)
    common: list[tuple[Loop, Loop]] = []
    for x, y in zip(la, lb, strict=False):
        if x[1] != y[1]:
            break
        common.append((x, y))
    if not common:
        return None
    n = len(common)
    inner_a = nest(la[n:], body_a)
    inner_b = nest(lb[n:], body_b)
    sub = {y[0]: IndexExpr(((1, x[0]),), 0) for x, y in common}
    try:
        renamed = map_stmt(inner_b, expr=lambda e: _rename_leaf(e, sub),
                           stmt=lambda s: _rename_cell(s, sub))
    except ValueError:  # a loop symbol read as a number that cannot be renamed
        return None
    parts_a = inner_a.stmts if isinstance(inner_a, Seq) and not _declares(inner_a) \
        else (inner_a,)
    outer = tuple(x for x, _ in common)
    merged = nest(outer, Seq((*parts_a, renamed)))
    if not isinstance(merged, ForLoop):
        return None
    # `a`'s statements keep their loops in the merged nest: only `b`'s part is new to it
    ok = safety(merged) if known is None else extend_safety(known, renamed, outer)
    return None if ok is None else (merged, ok)


def _rename_leaf(e: Expr, sub: dict[Symbol, IndexExpr]) -> Expr | None:
    """A leaf reading symbols, renamed (the rest is rebuilt around it by `map_expr`)."""
    if isinstance(e, Get):  # (the common leaf, renamed here directly)
        new = tuple([subst_index(ix, sub) for ix in e.index])
        for a, z in zip(e.index, new, strict=True):
            if a is not z:
                return Get(e.buffer, new)
        return None
    return subst_expr(e, sub) if isinstance(e, SymbolValue | ThreefryUniform) else None


def _declares(s: Seq) -> bool:
    return any(isinstance(x, DeclLocal) for x in s.stmts)


def _rename_cell(s: Stmt, sub: dict[Symbol, IndexExpr]) -> Stmt | None:
    """A cell write's index renamed (its value is renamed by the expression rule)."""
    if isinstance(s, SetCell):
        return SetCell(s.buffer, tuple(subst_index(ix, sub) for ix in s.index), s.value)
    return None
