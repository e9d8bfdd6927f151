"""Lowering coupled (concatenation) factors (seed 004): a factor is a disjoint union of
ranges, traversed one component after another. Per choice of one active component in
every factor, each tensor's concatenated axes resolve to the active component's iterator
plus its injection offset; a tensor naming an inactive component is not live there.

Input: an Accum, Block or RevSides whose projections have coupled factors. Output: loop
IR. An overlap (two sources live at one position) is a ShapeError; a gap is allowed.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from ..errors import ShapeError
from ..records import record
from ..vocabulary import NEUTRAL
from .assignments import Accum, Block, ConcatIndex, Projections, ProjIndex, RevSides
from .loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Expr,
    Fill,
    ForLoop,
    Get,
    IndexExpr,
    SetCell,
    Stmt,
    Symbol,
)
from .loop_ir import Noop as LNoop
from .loop_ir import Seq as LSeq

PLAIN_OK = frozenset({BinOp.ADD, BinOp.MUL, BinOp.MAX, BinOp.MIN, BinOp.ARG2})


@record
class Piece:
    """One choice of active components: its flat loops and each slot's resolved map
    (None where the slot names an inactive component)."""

    loops: tuple[tuple[Symbol, int], ...]
    lhs: tuple[IndexExpr, ...] | None
    rhs: tuple[tuple[IndexExpr, ...] | None, ...]


def _resolve(index: tuple[ProjIndex, ...], active: set[Symbol],
             coupled: set[Symbol]) -> tuple[IndexExpr, ...] | None:
    out: list[IndexExpr] = []
    for ix in index:
        if isinstance(ix, ConcatIndex):
            live = [(s, off) for s, off in ix.parts if s in active]
            if not live:
                return None
            if len(live) > 1:
                raise ShapeError("a concatenated axis has two active components at once")
            s, off = live[0]
            out.append(IndexExpr(((1, s),), off))
        else:
            if any(s in coupled and s not in active for _, s in ix.terms):
                return None
            out.append(ix)
    return tuple(out)


def flat(index: tuple[ProjIndex, ...]) -> tuple[IndexExpr, ...]:
    """An index map without concatenated axes (projections without coupled factors)."""
    out = tuple([ix for ix in index if isinstance(ix, IndexExpr)])
    if len(out) != len(index):
        raise ShapeError("internal: a concatenated axis outside a coupled factor")
    return out


def pieces(p: Projections) -> list[Piece]:
    """Every choice of one active component per factor (empty components skipped); a
    gated slot (a stack's operand) is live only under its gate."""
    coupled = {s for f in p.factors for s, _ in f}
    out: list[Piece] = []
    for choice in itertools.product(*p.factors):
        if any(n == 0 for _, n in choice):
            continue
        active = {s for s, _ in choice}
        loops = tuple(p.product) + tuple(choice)
        gates = p.gates or tuple(None for _ in p.rhs)
        out.append(Piece(loops, _resolve(p.lhs, active, coupled),
                         tuple(None if g is not None and g not in active
                               else _resolve(r, active, coupled)
                               for r, g in zip(p.rhs, gates, strict=True))))
    return out


def live_source(pc: Piece, what: str) -> int | None:
    """The one live source of a piece; two is the overlap a disjoint cover forbids."""
    live = [k for k, r in enumerate(pc.rhs) if r is not None]
    if len(live) > 1:
        raise ShapeError(f"{what}: overlapping slices: sources {live[0] + 1} and {live[1] + 1} "
                         "are both live at the same positions (a concatenation's components "
                         "must not overlap)")
    return live[0] if live else None


def check_cover(p: Projections, what: str) -> None:
    """The tiling check of a Block (also run when the operation is built, for a located
    error): at most one source live per position."""
    for pc in pieces(p):
        if pc.lhs is not None:
            live_source(pc, what)


def _nest(loops: tuple[tuple[Symbol, int], ...], body: Stmt) -> Stmt:
    for sym, n in reversed(loops):
        body = ForLoop(sym, n, body)
    return body


def _disjoint_writes(p: Projections, written: list[Piece]) -> bool:
    """Each piece writes distinct cells, and pieces write disjoint regions: the target map
    names every iterator of the piece and touches every coupled factor."""
    touched = {s for ix in p.lhs for s in _syms(ix)}
    if not all(any(s in touched for s, _ in f) for f in p.factors):
        return False
    for pc in written:
        assert pc.lhs is not None
        seen = {s for ix in pc.lhs for _, s in ix.terms}
        if any(len(ix.terms) > 1 for ix in pc.lhs) or any(s not in seen for s, _ in pc.loops):
            return False
    return True


def _syms(ix: ProjIndex) -> list[Symbol]:
    if isinstance(ix, ConcatIndex):
        return [s for s, _ in ix.parts]
    return [s for _, s in ix.terms]


def _cells(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _write(lhs: Buffer, written: list[tuple[Piece, Expr]], p: Projections, accum: BinOp,
           init: bool) -> Stmt:
    """The pieces' writes; `init` (the `=:` colon) gives unwritten cells the neutral
    element, and a read-modify-write needs it everywhere first."""
    disjoint = _disjoint_writes(p, [pc for pc, _ in written])
    covered = sum(_cells(tuple(n for _, n in pc.loops)) for pc, _ in written)
    plain = init and disjoint and accum in PLAIN_OK or accum == BinOp.ARG2
    stmts: list[Stmt] = []
    if not written and not init:
        return LNoop()
    if init and not (plain and covered == _cells(p.lhs_dims)):
        stmts.append(Fill(lhs, NEUTRAL[accum]))
    for pc, val in written:
        assert pc.lhs is not None
        if plain:
            stmts.append(_nest(pc.loops, SetCell(lhs, pc.lhs, val)))
        else:
            step = Binary(accum, Get(lhs, pc.lhs), val)
            stmts.append(_nest(pc.loops, SetCell(lhs, pc.lhs, step)))
    return stmts[0] if len(stmts) == 1 else LSeq(tuple(stmts))


ExprOf = Callable[[list[Expr]], Expr]


def lower_accum(a: Accum, lhs: Buffer, rhs: list[Buffer], expr_of: ExprOf) -> Stmt:
    """An Accum over coupled factors: a piece runs where the target and every operand
    are live."""
    written: list[tuple[Piece, Expr]] = []
    for pc in pieces(a.projections):
        if pc.lhs is None or any(r is None for r in pc.rhs):
            continue
        args: list[Expr] = [Get(b, r) for b, r in zip(rhs, pc.rhs, strict=True)
                            if r is not None]
        written.append((pc, expr_of(args)))
    return _write(lhs, written, a.projections, a.accum, a.initialize_neutral)


def lower_block(b: Block, lhs: Buffer, rhs: list[Buffer]) -> Stmt:
    """A Block: per piece, the one live source is accumulated into the target."""
    written: list[tuple[Piece, Expr]] = []
    for pc in pieces(b.projections):
        if pc.lhs is None:
            continue
        k = live_source(pc, b.label or f"block into {b.lhs.name}")
        if k is None:
            continue
        ix = pc.rhs[k]
        assert ix is not None
        written.append((pc, Get(rhs[k], ix)))
    return _write(lhs, written, b.projections, b.accum, b.initialize_neutral)


def lower_rev_sides(r: RevSides, src: Buffer, targets: list[Buffer]) -> Stmt:
    """Rev_sides: per piece, the source's slice is accumulated into the one live target."""
    stmts: list[Stmt] = []
    for pc in pieces(r.projections):
        if pc.lhs is None:
            continue
        k = live_source(pc, r.label or f"rev_sides from {r.src.name}")
        if k is None:
            continue
        ix = pc.rhs[k]
        assert ix is not None
        val: Expr = Get(src, pc.lhs)
        if r.accum != BinOp.ARG2:
            val = Binary(r.accum, Get(targets[k], ix), val)
        stmts.append(_nest(pc.loops, SetCell(targets[k], ix, val)))
    if not stmts:
        return LNoop()
    return stmts[0] if len(stmts) == 1 else LSeq(tuple(stmts))
