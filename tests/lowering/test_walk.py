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


def test_walk_stmts_pre_order_with_context_updated_by_the_consumer() -> None:
    """Pre-order; a child's context is made after the consumer saw its parent, and a
    mutable context updated at one statement is seen by the siblings after it."""
    from ocannl_ast.lowering.walk import gets, stmt_gets, stmt_nodes, walk_stmts

    nest = _row_sum()
    seen: list[tuple[str, int]] = []

    def enter(s: object, ctx: list[str]) -> list[str]:
        return [*ctx, type(s).__name__]  # a fresh list per nested statement

    for s, ctx in walk_stmts(nest, [], enter):
        seen.append((type(s).__name__, len(ctx)))
        if isinstance(s, DeclLocal):
            ctx.append("declared")  # visible to the siblings after it, not before
    assert seen == [("ForLoop", 0), ("Seq", 1), ("DeclLocal", 2), ("ForLoop", 3),
                    ("SetLocal", 4), ("SetCell", 3)]
    assert [type(s).__name__ for s in stmt_nodes(nest)] == [n for n, _ in seen]
    two = Binary(BinOp.ADD, Get(A, (index_of(I), index_of(K))), Get(B, (index_of(K),)))
    assert [g.buffer for g in gets(two)] == [A, B]
    assert [g.buffer for g in stmt_gets(Seq((SetCell(OUT, (index_of(I),), two),
                                             SetLocal("x", Get(OUT, (index_of(I),))))))] \
        == [A, B, OUT]


def test_subst_index_merges_like_terms_and_keeps_what_does_not_change() -> None:
    from ocannl_ast.lowering.walk import subst_index

    ix = IndexExpr(((3, I),), 2)
    assert subst_index(ix, {K: index_of(I)}) is ix  # nothing to replace: kept
    assert subst_index(ix, {I: IndexExpr(((2, K),), 1)}) == IndexExpr(((6, K),), 5)
    assert subst_index(ix, {I: IndexExpr((), 4)}) == IndexExpr((), 14)
    both = IndexExpr(((1, I), (1, K)), 0)
    assert subst_index(both, {K: index_of(I)}) == IndexExpr(((2, I),), 0)
    assert subst_index(both, {K: IndexExpr(((-1, I),), 0)}) == IndexExpr((), 0)
    read = Get(B, (index_of(K),))
    assert subst_expr(read, {I: index_of(S)}) is read  # an unchanged read is the same node
    assert subst_expr(read, {K: index_of(S)}) == Get(B, (index_of(S),))


def test_free_symbols_respects_loop_scope() -> None:
    inner = ForLoop(I, 4, SetCell(OUT, (index_of(I),), Get(B, (index_of(K),))))
    assert free_symbols(inner) == {K}
    assert free_symbols(ForLoop(K, 3, inner)) == set()
    assert free_symbols(Seq((ForLoop(K, 3, Noop()), inner))) == {K}
