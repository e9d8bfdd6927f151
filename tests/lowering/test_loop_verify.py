"""Loop IR verifier: every malformed shape is reported, well-formed programs pass."""

from __future__ import annotations

import pytest

from ocannl_ast.errors import OcannlError
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
    Const,
    DeclLocal,
    Fill,
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
    ThreefryUniform,
    const_index,
    index_of,
)
from ocannl_ast.lowering.loop_verify import LoopIRError, index_range, verify_program

I, J, K = Symbol(1, "i"), Symbol(2, "j"), Symbol(3, "k")
BATCH = Symbol(9, "batch")
X = Buffer(10, "x", (4, 3))
Y = Buffer(11, "y", (4,))


def prog(body: Stmt, *bufs: Buffer, static: tuple[Symbol, ...] = ()) -> LoopProgram:
    return LoopProgram("p", bufs or (X, Y), static, body)


def row_sum() -> Stmt:
    acc = Binary(BinOp.ADD, Get(Y, (index_of(I),)), Get(X, (index_of(I), index_of(J))))
    return Seq((Fill(Y, 0.0), ForLoop(I, 4, ForLoop(J, 3, SetCell(Y, (index_of(I),), acc)))))


def problems(p: LoopProgram) -> str:
    with pytest.raises(LoopIRError) as info:
        verify_program(p)
    assert isinstance(info.value, ValueError) and isinstance(info.value, OcannlError)
    return str(info.value)


def test_well_formed_programs_pass() -> None:
    verify_program(prog(row_sum()))
    # Sibling loops may reuse a symbol; locals are visible after their declaration.
    local = Seq((
        DeclLocal("acc", Const(0.0)),
        ForLoop(J, 3, SetLocal("acc", Binary(BinOp.ADD, GetLocal("acc"), SymbolValue(J)))),
        ForLoop(J, 4, SetCell(Y, (index_of(J),), GetLocal("acc"))),
    ))
    verify_program(prog(local))
    # Static arguments may index without a static range check (CheckIndex guards them).
    guarded = Seq((
        CheckIndex(index_of(BATCH), 4, code=3),
        ForLoop(J, 3, SetCell(Y, (const_index(0),), Get(X, (index_of(BATCH), index_of(J))))),
    ))
    verify_program(prog(guarded, static=(BATCH,)))


def test_index_arity() -> None:
    p = prog(ForLoop(I, 4, SetCell(Y, (index_of(I), index_of(I)), Const(1.0))))
    assert "2 indices for rank-1 'y'" in problems(p)


def test_iterator_outside_its_loop() -> None:
    p = prog(Seq((ForLoop(I, 4, Fill(Y, 0.0)), SetCell(Y, (index_of(I),), Const(1.0)))))
    assert "i#1 used outside its loop" in problems(p)
    p = prog(ForLoop(J, 4, SetCell(Y, (index_of(J),), SymbolValue(K))))
    assert "k#3 used outside its loop" in problems(p)


def test_symbol_bound_twice() -> None:
    p = prog(ForLoop(I, 4, ForLoop(I, 3, Fill(Y, 0.0))))
    assert "i#1 is already bound" in problems(p)
    p = prog(ForLoop(BATCH, 4, Fill(Y, 0.0)), static=(BATCH,))
    assert "batch#9 is already bound" in problems(p)


def test_unknown_buffer() -> None:
    stranger = Buffer(99, "z", (4,))
    assert "buffer 'z' (id 99) is not in the program" in problems(prog(Fill(stranger, 0.0)))
    same_name_other_dims = Buffer(11, "y", (5,))
    assert "buffer 'y'" in problems(prog(Fill(same_name_other_dims, 0.0)))


def test_locals() -> None:
    p = prog(ForLoop(I, 4, SetCell(Y, (index_of(I),), GetLocal("t"))))
    assert "local 't' read before its declaration" in problems(p)
    # A local declared inside a loop body is not visible after the loop.
    p = prog(Seq((ForLoop(I, 4, DeclLocal("t", Const(0.0))), SetLocal("t", Const(1.0)))))
    assert "local 't': assigned before its declaration" in problems(p)
    p = prog(Seq((DeclLocal("t", Const(0.0)), DeclLocal("t", Const(1.0)))))
    assert "declared twice" in problems(p)


def test_negative_extent_and_zero_coefficient() -> None:
    assert "negative extent -1" in problems(prog(ForLoop(I, -1, Fill(Y, 0.0))))
    zero = IndexExpr(((0, I),), 1)
    p = prog(ForLoop(I, 2, SetCell(Y, (zero,), Const(1.0))))
    assert "zero coefficient on i#1" in problems(p)


def test_static_index_ranges() -> None:
    strided = IndexExpr(((2, I),), 1)  # 2*i + 1 over i < 2 is 1..3, in range of 4
    verify_program(prog(ForLoop(I, 2, SetCell(Y, (strided,), Const(1.0)))))
    msg = problems(prog(ForLoop(I, 3, SetCell(Y, (strided,), Const(1.0)))))
    assert "'y' axis 0 ranges over [1, 5], outside [0, 4)" in msg
    shifted = IndexExpr(((1, J),), -1)
    read = Get(X, (index_of(I), shifted))
    msg = problems(prog(ForLoop(I, 4, ForLoop(J, 3, SetCell(Y, (index_of(I),), read)))))
    assert "read of 'x'" in msg and "'x' axis 1 ranges over [-1, 1]" in msg
    assert "'y' axis 0" in problems(prog(SetCell(Y, (const_index(4),), Const(0.0))))


def test_index_range_merges_repeated_symbols() -> None:
    e = IndexExpr(((1, I), (-1, I), (2, J)), 3)
    assert index_range(e, {I: 5, J: 2}) == (3, 5)
    assert index_range(IndexExpr(((-2, I),), 0), {I: 3}) == (-4, 0)
    assert index_range(index_of(BATCH), {BATCH: None}) is None


def test_check_index_and_threefry() -> None:
    msg = problems(prog(CheckIndex(index_of(BATCH), 4, code=0), static=(BATCH,)))
    assert "error code 0" in msg
    bad_key = ThreefryUniform((1 << 32, 0, 0, 0), index_of(I))
    msg = problems(prog(ForLoop(I, 4, SetCell(Y, (index_of(I),), bad_key))))
    assert "threefry key" in msg
    negative = ThreefryUniform((0, 0, 0, 0), IndexExpr(((1, I),), -1))
    msg = problems(prog(ForLoop(I, 4, SetCell(Y, (index_of(I),), negative))))
    assert "threefry counter ranges over [-1, 2]" in msg


def test_signature_problems_and_all_reported_together() -> None:
    dup = Buffer(12, "y", (4,))
    msg = problems(prog(Seq((Fill(dup, 0.0), ForLoop(I, -1, Fill(Y, 0.0)))), Y, dup))
    assert "buffer name 'y' appears twice" in msg
    assert "negative extent -1" in msg
    assert msg.count("\n  - ") == 2


def test_zero_extent_loop_body_is_never_run() -> None:
    """A size-0 axis iterates zero times: its body makes no access, whatever the index."""
    verify_program(prog(ForLoop(I, 0, SetCell(Y, (index_of(I),), Const(1.0)))))
    empty = Buffer(12, "e", (0,))
    p = LoopProgram("p", (X, Y, empty), (), ForLoop(I, 0, SetCell(empty, (index_of(I),),
                                                                  Const(1.0))))
    verify_program(p)
    # the structural checks still apply inside a dead loop
    assert "symbol j#2 used outside its loop" in problems(
        prog(ForLoop(I, 0, SetCell(Y, (index_of(J),), Const(1.0)))))
    # but an access outside a zero-extent loop to an empty buffer is out of bounds
    bad = LoopProgram("p", (X, Y, empty), (), SetCell(empty, (IndexExpr((), 0),), Const(1.0)))
    assert "'e' axis 0 ranges over [0, 0], outside [0, 0)" in problems(bad)
