"""The loop-IR walker (`lowering/walk.py`) and loop-nest helpers (`lowering/nests.py`) on
hand-built programs, and the pipeline's decisions coming from the passes that made them."""

from __future__ import annotations

import numpy as np

import ocannl_ast as oc
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Comment,
    Const,
    DeclLocal,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    Noop,
    Seq,
    SetCell,
    SetLocal,
    Symbol,
    SymbolValue,
    index_of,
)
from ocannl_ast.lowering.nests import cellwise, match_reduction, peel, units
from ocannl_ast.lowering.walk import (
    Accesses,
    fold_expr,
    free_symbols,
    map_expr,
    map_stmt,
    reads,
    scoped,
    subst_expr,
    work,
    writes,
)
from ocannl_ast.tensor import pipeline
from ocannl_ast.tensor.context import as_code

I, K, S = Symbol(1, "i"), Symbol(2, "k"), Symbol(3, "s")
A, B, OUT = Buffer(1, "a", (4, 3)), Buffer(2, "b", (3,)), Buffer(3, "out", (4,))


def _row_sum() -> ForLoop:
    step = SetLocal("acc", Binary(BinOp.ADD, GetLocal("acc"),
                                  Get(A, (index_of(I), index_of(K)))))
    return ForLoop(I, 4, Seq((DeclLocal("acc", Const(0.0)), ForLoop(K, 3, step),
                              SetCell(OUT, (index_of(I),), GetLocal("acc")))))


def test_map_expr_is_bottom_up_and_keeps_unchanged_nodes() -> None:
    e = Binary(BinOp.MUL, Get(B, (index_of(K),)), Const(2.0))
    assert map_expr(e, lambda x: None) is e
    zeroed = map_expr(e, lambda x: Const(0.0) if isinstance(x, Get) else None)
    assert zeroed == Binary(BinOp.MUL, Const(0.0), Const(2.0))
    assert fold_expr(e, lambda x, kids: 1 + sum(kids)) == 3


def test_map_stmt_rewrites_expressions_and_statements() -> None:
    nest = _row_sum()
    renamed = map_stmt(nest, expr=lambda x: GetLocal("t") if x == GetLocal("acc") else None,
                       stmt=lambda s: DeclLocal("t", s.init) if isinstance(s, DeclLocal) else
                       SetLocal("t", s.value) if isinstance(s, SetLocal) else None)
    red = match_reduction(renamed)
    assert red is not None and red.acc == "t" and red.store.value == GetLocal("t")


def test_queries() -> None:
    nest = _row_sum()
    assert reads(nest) == {A} and writes(nest) == {OUT}
    acc = Accesses()
    assert acc.read_ids(nest) == {1} and acc.write_ids(nest) == {3}
    assert work(nest) == 4 * (1 + 3 + 1)
    assert [len(loops) for s, loops in scoped(nest) if isinstance(s, SetLocal)] == [2]
    guarded = ForLoop(I, 4, SetCell(OUT, (index_of(I),), SymbolValue(S)))
    assert free_symbols(guarded) == {S} and free_symbols(nest) == set()


def test_nests() -> None:
    nest = _row_sum()
    red = match_reduction(nest)
    assert red is not None and red.outer == ((I, 4),) and red.reduce == ((K, 3),)
    assert red.rebuilt(red.store) == nest
    copy = ForLoop(I, 4, Seq((Comment("c"), SetCell(OUT, (index_of(I),), Const(1.0)))))
    assert peel(copy)[0] == [(I, 4)] and cellwise(copy) is not None
    body = Seq((Fill(OUT, 0.0), Seq((Noop(), nest.body)), nest))
    assert units(body) == [Fill(OUT, 0.0), Noop(), nest.body, nest]
    shifted = subst_expr(Get(B, (index_of(K),)), {K: IndexExpr(((2, I),), 1)})
    assert shifted == Get(B, (IndexExpr(((2, I),), 1),))


def test_lowered_decisions_come_from_the_passes() -> None:
    x = oc.ndarray(np.ones((2, 3)), label="x")
    y = oc.einsum("ij=>i", oc.exp(x) * oc.number(2.0, label="two"))
    out = pipeline.run(as_code(y.forward), pipeline.Options("f"))
    names = {b.id: b.name for b in out.trace[4][1].buffers}  # the lowered program's
    assert {names[i] for i in out.folded} == {"two"}
    assert out.virtual and not any(b.id in out.virtual | out.folded for b in out.prog.buffers)
