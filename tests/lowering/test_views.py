"""`lowering.views` and the passes that must see a batch slice's view as its parent's cells:
resolution of every access kind, the index check placed first, the fill that clears only
the view, vectorized writes, zero-fill folding, and the read/write sets."""

from __future__ import annotations

import pytest

from ocannl_ast.errors import ShapeError
from ocannl_ast.lowering import assignments as A
from ocannl_ast.lowering.asgn_analysis import read_write_sets
from ocannl_ast.lowering.loop_ir import (
    BinOp,
    Buffer,
    CheckIndex,
    Const,
    Fill,
    ForLoop,
    Get,
    IndexExpr,
    Seq,
    SetCell,
    SetFromVec,
    Symbol,
    VecUnOp,
    View,
    index_of,
)
from ocannl_ast.lowering.lower import lower
from ocannl_ast.lowering.simplify import fold_zero_fills
from ocannl_ast.lowering.views import resolve_views
from ocannl_ast.lowering.walk import stmt_nodes

S = Symbol(900, "i")
PARENT = Buffer(10, "x", (4, 3))
OTHER = Buffer(12, "y", (3,))


def _view(parent: Buffer = PARENT, shift: tuple[int, ...] = (0,), lead_offset: int = 0
          ) -> Buffer:
    dims = parent.dims[1:]
    return Buffer(20, "x_row", tuple(d - 2 * s for d, s in zip(dims, shift, strict=True)),
                  view=View(parent, (IndexExpr(((1, S),), lead_offset),), shift,
                            ((S, 4),)))


def test_get_and_set_move_to_the_parent_after_one_check() -> None:
    v, k = _view(), Symbol(901, "k")
    body = ForLoop(k, 3, SetCell(v, (index_of(k),), Get(v, (index_of(k),))))
    out = resolve_views(body)
    assert isinstance(out, Seq) and out.stmts[0] == CheckIndex(index_of(S), 4, 1)
    cell = next(s for s in stmt_nodes(out) if isinstance(s, SetCell))
    want = (index_of(S), index_of(k))
    assert cell.buffer == PARENT and cell.index == want
    assert cell.value == Get(PARENT, want)


def test_a_repeated_check_of_the_same_index_is_dropped() -> None:
    v = _view()
    body = Seq((CheckIndex(index_of(S), 4, 1), SetCell(v, (IndexExpr((), 0),), Const(1.0))))
    out = resolve_views(body)
    assert sum(isinstance(s, CheckIndex) for s in stmt_nodes(out)) == 1


def test_padded_parent_shifts_every_axis() -> None:
    parent = Buffer(10, "x", (6, 5))  # margins (1, 1) on both axes
    v = _view(parent, shift=(1,), lead_offset=1)
    out = resolve_views(SetCell(v, (IndexExpr((), 2),), Const(1.0)))
    cell = next(s for s in stmt_nodes(out) if isinstance(s, SetCell))
    assert cell.index == (IndexExpr(((1, S),), 1), IndexExpr((), 3))


def test_fill_of_a_view_clears_only_its_row() -> None:
    out = resolve_views(Fill(_view(), 0.0))
    assert not any(isinstance(s, Fill) for s in stmt_nodes(out))
    cells = [s for s in stmt_nodes(out) if isinstance(s, SetCell)]
    assert len(cells) == 1 and cells[0].buffer == PARENT
    assert cells[0].index[0] == index_of(S)
    loops = [s for s in stmt_nodes(out) if isinstance(s, ForLoop)]
    assert [lp.extent for lp in loops] == [3]


def test_vectorized_write_into_a_contiguous_view() -> None:
    parent = Buffer(10, "x", (4, 8))
    v = Buffer(20, "x_row", (8,), view=View(parent, (index_of(S),), (0,), ((S, 4),)))
    c = Symbol(902, "c")
    out = resolve_views(SetFromVec(v, index_of(c), VecUnOp.UINT4X32_TO_PREC_UNIFORM,
                                   Get(OTHER, (index_of(c),)), 4))
    vec = next(s for s in stmt_nodes(out) if isinstance(s, SetFromVec))
    assert vec.buffer == parent and vec.vector == IndexExpr(((1, c), (2, S)), 0)


def test_vectorized_write_into_a_ragged_view_is_refused() -> None:
    parent = Buffer(10, "x", (4, 6))
    v = Buffer(20, "x_row", (6,), view=View(parent, (index_of(S),), (0,), ((S, 4),)))
    with pytest.raises(ShapeError, match="not whole vectors"):
        resolve_views(SetFromVec(v, IndexExpr((), 0), VecUnOp.UINT4X32_TO_PREC_UNIFORM,
                                 Get(OTHER, (IndexExpr((), 0),)), 4))


def _accum(lhs: Buffer, acc: BinOp, init: bool) -> A.Accum:
    k = Symbol(903, "k")
    p = A.Projections(((k, 3),), (index_of(k),), ((index_of(k),),), (3,), ((3,),))
    return A.Accum(lhs, acc, init, A.Arg(0), (OTHER,), p)


def test_zero_fill_of_the_parent_is_not_folded_into_a_view() -> None:
    v = _view()
    code = A.seq(A.Fetch(PARENT, A.ConstantFill(0.0)), _accum(v, BinOp.ADD, False))
    assert fold_zero_fills(code) == code  # folding would leave the other rows unzeroed
    own = A.seq(A.Fetch(v, A.ConstantFill(0.0)), _accum(v, BinOp.ADD, False))
    assert fold_zero_fills(own) == _accum(v, BinOp.ADD, True)


def test_a_write_through_a_view_reads_and_writes_the_parent() -> None:
    reads, writes = read_write_sets(_accum(_view(), BinOp.ARG2, True))
    assert reads == {PARENT.id, OTHER.id} and writes == {PARENT.id}


def test_lowered_program_has_no_view_buffers() -> None:
    prog = lower(_accum(_view(), BinOp.ARG2, True), "r")
    assert {b.id for b in prog.buffers} == {PARENT.id, OTHER.id}
    assert all(b.view is None for b in prog.buffers)
