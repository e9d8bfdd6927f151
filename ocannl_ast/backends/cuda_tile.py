"""CUDA backend, register tiling of reductions: one thread computes a TM x TN tile of output
cells, so that the loads a cell shares with its neighbours are made once per tile.

Stage: a hook of `cuda_backend`'s grid-stride kernels. Input: the independent outer loops
of a nest and the statement they run, in the loop IR. Output: the kernel body's lines.
The statement must be a reduction into scalar locals: declarations, one reduction loop nest
whose innermost body only sets locals, then an epilogue (the stores). The two innermost
outer loops may be tiled: rows (the second to last) give a thread the cells
``TM*r, ..., TM*r + TM-1``, columns (the fastest axis) the cells ``c, c + NC, ...`` (NC
tiles across), so consecutive threads read and write consecutive addresses along it. Each
cell keeps its own accumulators, its sum in the same order from the same initial value
with the same operations, so the bits are today's (one cell a thread); only the loads that
several cells of a tile make at the same index are read once into a local. A cell past an
extent computes with the index of its tile's first cell along that axis (a real cell of the
same thread: no read of another thread's cells) and stores nothing.

``OCANNL_AST_CUDA_TILE``: ``0`` off; ``1`` (the default) where the work pays (a long
enough reduction and enough threads left); ``all`` every nest of that form (tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ocannl_ast import config
from ocannl_ast.backends.c_renderer import CRenderer
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering import nests
from ocannl_ast.lowering.loop_ir import (
    Comment,
    DeclLocal,
    Expr,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    Noop,
    Seq,
    SetCell,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    index_of,
)
from ocannl_ast.lowering.walk import (
    Loop,
    expr_nodes,
    map_stmt,
    own_exprs,
    stmt_gets,
    stmt_nodes,
    subst_expr,
    subst_index,
)

ENV = "OCANNL_AST_CUDA_TILE"
TILE = 4  #: the largest tile side
MIN_REDUCTION = 32  #: terms a cell sums at least, for the default mode to tile
MIN_THREADS = 1 << 15  #: threads the tiled kernel keeps at least (the default mode)


def mode() -> str:
    """``"0"``, ``"1"`` or ``"all"`` (`ENV`; another value is a BackendError)."""
    value = config.cuda_tile()
    if value not in ("0", "1", "all"):
        raise BackendError(f"{ENV} must be 0, 1 or all, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Tile:
    """How a nest is tiled: the outer loops' positions of the row and column axes (-1:
    none), the tile's sides, and the reduction's parts."""

    rows: int
    tm: int
    cols: int
    tn: int
    pre: tuple[Stmt, ...]  #: the locals' declarations
    red: tuple[Loop, ...]  #: the reduction loops, outermost first
    body: tuple[Stmt, ...]  #: their innermost body (sets of locals)
    post: tuple[Stmt, ...]  #: the epilogue (the stores)

    def extents(self, loops: list[Loop]) -> list[int]:
        """The grid's extent per outer loop: tiles along a tiled axis, else the loop's."""
        out = [n for _, n in loops]
        for pos, side in ((self.rows, self.tm), (self.cols, self.tn)):
            if pos >= 0:
                out[pos] = -(-out[pos] // side)
        return out


def _flat(s: Stmt) -> list[Stmt]:
    if isinstance(s, Seq):
        return [y for x in s.stmts for y in _flat(x)]
    return [] if isinstance(s, Noop | Comment) else [s]


def _split(inner: Stmt) -> tuple[tuple[Stmt, ...], ForLoop, tuple[Stmt, ...]] | None:
    """(declarations, the reduction loop, the epilogue) of a reduction into locals."""
    stmts = _flat(inner)
    k = next((i for i, s in enumerate(stmts) if isinstance(s, ForLoop)), None)
    if k is None or k == 0 or not all(isinstance(s, DeclLocal) for s in stmts[:k]):
        return None
    loop, post = stmts[k], tuple(stmts[k + 1:])
    assert isinstance(loop, ForLoop)
    if not all(isinstance(s, SetCell | SetLocal | DeclLocal) for s in post):
        return None
    return tuple(stmts[:k]), loop, post


def plan(loops: list[Loop], inner: Stmt) -> Tile | None:
    """The tiling of the nest ``for loops: inner``, or None to leave it one cell a thread."""
    how = mode()
    if how == "0" or not loops:
        return None
    parts = _split(inner)
    if parts is None:
        return None
    pre, loop, post = parts
    red, last = nests.peel(loop)
    body = tuple(_flat(last))
    if not body or not all(isinstance(s, SetLocal | DeclLocal) for s in body):
        return None
    declared = {s.name for s in stmt_nodes(inner) if isinstance(s, DeclLocal)}
    outer = {sym for sym, _ in loops}
    for s in stmt_nodes(inner):
        if isinstance(s, SetLocal) and s.name not in declared:
            return None
        for e in own_exprs(s):
            for x in expr_nodes(e):
                if isinstance(x, GetLocal) and x.name not in declared:
                    return None
                if isinstance(x, SymbolValue) and x.symbol in outer:
                    return None  # a counter read as a number: left alone
    gets = list(stmt_gets(Seq(body)))
    if any(g.buffer.uint4x32 for g in gets):
        return None

    def shares(sym: Symbol) -> bool:  # some load of the reduction does not vary with `sym`
        return any(all(sym not in (s for _, s in ix.terms) for ix in g.index) for g in gets)

    cols = len(loops) - 1 if shares(loops[-1][0]) and loops[-1][1] > 1 else -1
    rows = len(loops) - 2 if (len(loops) >= 2 and shares(loops[-2][0])
                              and loops[-2][1] > 1) else -1
    if rows < 0 and cols < 0:
        return None
    max_m = min(TILE, loops[rows][1]) if rows >= 0 else 1
    max_n = min(TILE, loops[cols][1]) if cols >= 0 else 1
    if how == "all":
        tm, tn = max_m, max_n
    else:
        if math.prod(n for _, n in red) < MIN_REDUCTION:
            return None
        cells = math.prod(n for _, n in loops)
        fits = [(m * n, n, m) for m in range(1, max_m + 1) for n in range(1, max_n + 1)
                if m * n > 1 and cells // (m * n) >= MIN_THREADS]
        if not fits:
            return None
        _, tn, tm = max(fits)
    if tm * tn == 1:
        return None
    return Tile(rows if tm > 1 else -1, tm, cols if tn > 1 else -1, tn, pre, tuple(red), body,
                post)


def render(tile: Tile, r: CRenderer, loops: list[Loop], coords: list[str],
           depth: int) -> list[str]:
    """The lines of a thread's tile: `coords` are the C names of the grid's coordinates
    (tile numbers along the tiled axes, else the outer loops' counters, named already)."""
    pad = "  " * depth
    itype = r.syntax.index_type
    lines: list[str] = []
    # per tiled axis: the symbol of each of its cells, and the condition that cell is real
    axis: dict[int, list[tuple[Symbol, str | None]]] = {}
    for pos, side, rows in ((tile.rows, tile.tm, True), (tile.cols, tile.tn, False)):
        if pos < 0:
            continue
        sym, extent = loops[pos]
        count = -(-extent // side)
        cells: list[tuple[Symbol, str | None]] = []
        for k in range(side):
            raw = f"{side}*{coords[pos]} + {k}" if rows else f"{coords[pos]} + {k * count}"
            can_pass = (rows and k >= extent - side * (count - 1)) or (
                not rows and (k + 1) * count > extent)
            name = r.fresh(f"{coords[pos]}_")
            cell = Symbol(-1 - len(r.symbols), f"{sym.name}{k}")
            r.symbols[cell] = name
            first = f"{side}*{coords[pos]}" if rows else coords[pos]  # the tile's cell 0: real
            value = f"{raw} < {extent} ? {raw} : {first}" if can_pass else raw
            lines.append(f"{pad}const {itype} {name} = {value};")
            cells.append((cell, f"{raw} < {extent}" if can_pass else None))
        axis[pos] = cells
    row_cells = axis.get(tile.rows, [(loops[0][0], None)])
    col_cells = axis.get(tile.cols, [(loops[0][0], None)])
    parts: list[tuple[dict[Symbol, IndexExpr], str, str]] = []  # (substitution, local
    # renaming suffix, guard) of each cell, row-major
    for a, (rs, rg) in enumerate(row_cells):
        for b, (cs, cg) in enumerate(col_cells):
            sub: dict[Symbol, IndexExpr] = {}
            if tile.rows >= 0:
                sub[loops[tile.rows][0]] = index_of(rs)
            if tile.cols >= 0:
                sub[loops[tile.cols][0]] = index_of(cs)
            guard = " && ".join(g for g in (rg, cg) if g is not None)
            parts.append((sub, f"_t{a}_{b}", guard))

    def cell_stmts(stmts: tuple[Stmt, ...], sub: dict[Symbol, IndexExpr], suffix: str) -> list[Stmt]:
        return [_cell(s, sub, suffix) for s in stmts]

    pre = [x for sub, sfx, _ in parts for x in cell_stmts(tile.pre, sub, sfx)]
    bodies = [cell_stmts(tile.body, sub, sfx) for sub, sfx, _ in parts]
    hoisted = _hoist(bodies, r)
    inner: Stmt = Seq((*hoisted, *(x for b in bodies for x in b)))
    r.seq(tuple(pre), depth, lines)
    r.stmt(nests.nest(tile.red, inner), depth, lines)
    for sub, sfx, guard in parts:
        post: list[str] = []
        r.seq(tuple(cell_stmts(tile.post, sub, sfx)), depth + bool(guard), post)
        lines += [f"{pad}if ({guard}) {{", *post, f"{pad}}}"] if guard else post
    return lines


def _cell(s: Stmt, sub: dict[Symbol, IndexExpr], suffix: str) -> Stmt:
    """`s` for one cell of the tile: its counters replaced, its locals renamed."""
    def expr(x: Expr) -> Expr | None:
        return GetLocal(x.name + suffix) if isinstance(x, GetLocal) else None

    def stmt(x: Stmt) -> Stmt | None:
        match x:
            case SetCell(buffer=b, index=ix, value=v):
                return SetCell(b, tuple(subst_index(i, sub) for i in ix), subst_expr(v, sub))
            case DeclLocal(name=n, init=v):
                return DeclLocal(n + suffix, subst_expr(v, sub))
            case SetLocal(name=n, value=v):
                return SetLocal(n + suffix, subst_expr(v, sub))
            case _:
                return None
    return map_stmt(s, expr, stmt)


def _hoist(bodies: list[list[Stmt]], r: CRenderer) -> list[Stmt]:
    """Read once into a local each load that several cells make (the bodies are rewritten
    to read the local); the declarations of those locals, in order of first use."""
    seen: dict[Get, int] = {}
    for body in bodies:
        for g in set(stmt_gets(Seq(tuple(body)))):
            seen[g] = seen.get(g, 0) + 1
    order = [g for body in bodies for g in stmt_gets(Seq(tuple(body)))]
    names: dict[Get, str] = {}
    for g in order:
        if seen[g] > 1 and g not in names:
            names[g] = r.fresh("ld")
    if not names:
        return []

    def rule(x: Expr) -> Expr | None:
        return GetLocal(names[x]) if isinstance(x, Get) and x in names else None

    for body in bodies:
        body[:] = [map_stmt(s, rule) for s in body]
    return [DeclLocal(n, g) for g, n in names.items()]

