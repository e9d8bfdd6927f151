"""Facts about loop-IR units memoized for one pipeline run (`lowering.unit_memo`): kept by
node identity within `shared()`, never outside it, and the passes' answers unchanged."""

from __future__ import annotations

import numpy as np

import ocannl_ast as oc
from ocannl_ast.lowering import unit_memo
from ocannl_ast.lowering.loop_ir import Buffer, Const, ForLoop, IndexExpr, Seq, SetCell, Symbol
from ocannl_ast.lowering.loop_print import print_program
from ocannl_ast.lowering.nests import match_reduction, peel
from ocannl_ast.lowering.walk import Accesses, reads, scoped, stmt_nodes, writes


def _nest() -> ForLoop:
    i, j = Symbol(1, "i"), Symbol(2, "j")
    buf = Buffer(7, "b", (2, 3))
    cell = SetCell(buf, (IndexExpr(((1, i),), 0), IndexExpr(((1, j),), 0)), Const(1.0))
    return ForLoop(i, 2, ForLoop(j, 3, cell))


def test_kept_within_shared_and_not_outside() -> None:
    calls: list[object] = []

    @unit_memo.memoized
    def fact(x: object) -> int:
        calls.append(x)
        return len(calls)

    node = _nest()
    assert fact(node) == 1 and fact(node) == 2  # outside: asked afresh each time
    with unit_memo.shared():
        first = fact(node)
        assert fact(node) == first  # kept by identity
        other = _nest()  # equal, but another node
        assert fact(other) == first + 1
        with unit_memo.shared():  # nested: the outer block's memo
            assert fact(node) == first
    assert fact(node) == first + 2  # the block's memo is gone


def test_walks_answer_the_same_inside_and_outside() -> None:
    node = Seq((_nest(), _nest()))
    outside = (list(stmt_nodes(node)), list(scoped(node)), peel(node.stmts[0]),
               match_reduction(node.stmts[0]), reads(node), writes(node))
    with unit_memo.shared():
        for _ in range(2):
            inside = (list(stmt_nodes(node)), list(scoped(node)), peel(node.stmts[0]),
                      match_reduction(node.stmts[0]), reads(node), writes(node))
            assert inside == outside
        loops, _ = peel(node.stmts[0])
        loops.append((Symbol(9, "k"), 4))  # a caller changing its list changes no memo
        assert peel(node.stmts[0]) == outside[2]
        acc, acc2 = Accesses(), Accesses()
        assert acc.write_ids(node) == acc2.write_ids(node) == frozenset({7})


def test_a_compile_gives_the_same_program_twice() -> None:
    """The memo lives for one run: a second compile of the same graph lowers to the same
    program text (nothing of the first run's memo leaks into it)."""
    x = oc.ndarray(np.arange(6, dtype=np.float32).reshape(2, 3), batch_axes=1)
    w = oc.param("w_memo", output_dims=[4])
    y = oc.relu(w @ x) * 2.0
    loss = oc.einsum("b|o=>o", y) * 0.5
    code = [oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1, momentum=0.9)]
    prog1, _, _ = oc.Context().lower_code(code, name="memo_twice")
    prog2, _, _ = oc.Context().lower_code(code, name="memo_twice")
    assert print_program(prog1) == print_program(prog2)
