"""Loop IR printer: renumbered symbols, minimal parentheses, every node kind (golden)."""

from __future__ import annotations

import sys
from pathlib import Path

from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
    Comment,
    Const,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Noop,
    Precision,
    Seq,
    SetCell,
    SetLocal,
    Symbol,
    SymbolValue,
    Ternary,
    TernOp,
    ThreefryUniform,
    Unary,
    UnOp,
    const_index,
    index_of,
)
from ocannl_ast.lowering.loop_print import SymbolNames, expr_text, format_number, print_program
from ocannl_ast.lowering.loop_verify import verify_program

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden_util import assert_golden

A, B = Symbol(57, "i"), Symbol(3, "j")
BATCH = Symbol(40, "batch")
X = Buffer(1, "x", (3, 2))
S = Buffer(2, "s", ())


def text(e: Expr) -> str:
    return expr_text(e, SymbolNames(()))


def bin_(op: BinOp, lhs: Expr, rhs: Expr) -> Binary:
    return Binary(op, lhs, rhs)


def v(name: str) -> GetLocal:
    return GetLocal(name)


def test_symbols_renumbered_in_binding_order() -> None:
    body = ForLoop(A, 3, ForLoop(B, 2, SetCell(X, (index_of(A), index_of(B)), Const(1.0))))
    other = ForLoop(B, 3, ForLoop(A, 2, SetCell(X, (index_of(B), index_of(A)), Const(1.0))))
    p1 = LoopProgram("p", (X,), (), body)
    p2 = LoopProgram("p", (X,), (), other)
    assert print_program(p1) == print_program(p2)
    assert "x[i0, i1] := 1" in print_program(p1)


def test_static_args_and_free_symbols() -> None:
    body = Seq((
        CheckIndex(index_of(BATCH), 3, code=2),
        SetCell(X, (index_of(BATCH), index_of(Symbol(8, "lost"))), Const(0.0)),
    ))
    out = print_program(LoopProgram("p", (X,), (BATCH,), body, Precision.FLOAT64))
    assert out.splitlines()[0] == "routine p(x[3,2]) static(s_batch) precision=float64"
    assert "check 0 <= s_batch < 3 else return 2" in out
    assert "x[s_batch, u0] := 0" in out  # an unbound symbol is visible, not hidden


def test_parentheses_follow_precedence_and_tree_shape() -> None:
    a, b, c = v("a"), v("b"), v("c")
    assert text(bin_(BinOp.ADD, a, bin_(BinOp.MUL, b, c))) == "a + b * c"
    assert text(bin_(BinOp.MUL, bin_(BinOp.ADD, a, b), c)) == "(a + b) * c"
    assert text(bin_(BinOp.SUB, a, bin_(BinOp.SUB, b, c))) == "a - (b - c)"
    assert text(bin_(BinOp.SUB, bin_(BinOp.SUB, a, b), c)) == "a - b - c"
    assert text(bin_(BinOp.POW, a, bin_(BinOp.POW, b, c))) == "a ** b ** c"
    assert text(bin_(BinOp.POW, bin_(BinOp.POW, a, b), c)) == "(a ** b) ** c"
    assert text(bin_(BinOp.LT, bin_(BinOp.LT, a, b), c)) == "(a < b) < c"
    assert text(Unary(UnOp.NEG, bin_(BinOp.ADD, a, b))) == "-(a + b)"
    assert text(bin_(BinOp.SUB, a, Const(-1.0))) == "a - -1"
    assert text(bin_(BinOp.POW, Const(-2.0), a)) == "(-2) ** a"
    assert text(bin_(BinOp.MAX, a, Unary(UnOp.EXP, b))) == "max(a, exp(b))"
    assert text(Ternary(TernOp.WHERE, a, b, c)) == "where(a, b, c)"


def test_numbers_and_indices() -> None:
    assert [format_number(x) for x in (0.0, -0.0, 3.0, 0.5, float("inf"), float("nan"))] == [
        "0", "-0", "3", "0.5", "inf", "nan",
    ]
    names = SymbolNames(())
    names.bind(A), names.bind(B)
    e = Get(X, (IndexExpr(((2, A), (-1, B)), -1), IndexExpr(((-3, B),), 4)))
    assert expr_text(e, names) == "x[2*i0 - i1 - 1, -3*i1 + 4]"
    assert expr_text(Get(S, ()), names) == "s[]"


def all_nodes_program() -> LoopProgram:
    """One of every statement and expression kind."""
    i, j = index_of(A), index_of(B)
    cell = Get(X, (i, j))
    key = (1, 2, 0xDEADBEEF, 4)
    value = Ternary(
        TernOp.FMA,
        Unary(UnOp.RELU, cell),
        bin_(BinOp.RELU_GATE, SymbolValue(A), Get(S, ())),
        Ternary(TernOp.WHERE, bin_(BinOp.NE, v("acc"), Const(0.25)), Const(float("-inf")),
                ThreefryUniform(key, IndexExpr(((2, A), (1, B)), 0))),
    )
    row = Seq((
        DeclLocal("acc", Const(0.0)),
        ForLoop(B, 2, SetLocal("acc", bin_(BinOp.ADD, v("acc"), cell))),
        ForLoop(B, 2, SetCell(X, (i, j), value)),
        Noop(),
    ))
    body = Seq((
        Comment("all node kinds"),
        CheckIndex(IndexExpr(((1, BATCH),), 1), 4, code=5),
        Fill(S, 1.5),
        ForLoop(A, 3, row),
        SetCell(S, (), Get(X, (index_of(BATCH, 1, -1), const_index(1)))),
    ))
    return LoopProgram("all_nodes", (X, S), (BATCH,), body)


def test_all_nodes_golden() -> None:
    p = all_nodes_program()
    verify_program(p)
    out = print_program(p)
    assert out == print_program(all_nodes_program())  # deterministic
    assert_golden("loop_print_all_nodes.txt", out)
