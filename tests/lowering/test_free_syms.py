"""`lowering.free_syms.free_symbols` (the static arguments `bind_statics` finds) agrees with
`lowering.walk.free_symbols` on every statement and expression form, loop scopes included,
and on the bodies of real programs (an MLP step, a program reading static indices)."""

from __future__ import annotations

import numpy as np

import ocannl_ast as oc
from ocannl_ast.lowering import walk
from ocannl_ast.lowering.free_syms import free_symbols
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
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
    SetFromVec,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    ThreefryUniform,
    Unary,
    UnOp,
    index_of,
)
from ocannl_ast.vocabulary import TernOp, VecUnOp

I, K, N, M, T = (Symbol(1, "i"), Symbol(2, "k"), Symbol(3, "n"), Symbol(4, "m"),
                 Symbol(5, "t"))
A, OUT = Buffer(1, "a", (4, 3)), Buffer(2, "out", (4,))


def _agree(s: Stmt) -> set[Symbol]:
    got = free_symbols(s)
    assert len(got) == len(set(got))  # each once
    assert set(got) == walk.free_symbols(s)
    return set(got)


def test_every_form_and_loop_scopes() -> None:
    two = IndexExpr(((2, I), (1, N)), 1)
    expr = Ternary(TernOp.WHERE, SymbolValue(M), Unary(UnOp.NEG, Get(A, (two, index_of(K)))),
                   Binary(BinOp.ADD, ThreefryUniform((1, 2, 3, 4), index_of(T)), Const(1.0)))
    leaf = Seq((Noop(), Comment("c"), Fill(OUT, 0.0), CheckIndex(index_of(N), 4, 7),
                DeclLocal("x", expr), SetLocal("x", GetLocal("x")),
                SetCell(OUT, (index_of(I),), GetLocal("x")),
                SetFromVec(OUT, index_of(K), VecUnOp.UINT4X32_TO_PREC_UNIFORM,
                           Get(A, (index_of(I), index_of(T))), 4)))
    assert _agree(leaf) == {I, K, N, M, T}
    assert _agree(ForLoop(I, 4, ForLoop(K, 3, leaf))) == {N, M, T}
    # a loop binds its symbol only inside; an inner loop reusing it leaves it bound
    inner = ForLoop(K, 2, SetCell(OUT, (index_of(K),), SymbolValue(N)))
    assert _agree(ForLoop(K, 3, Seq((inner, leaf)))) == {I, N, M, T}
    assert _agree(Seq((ForLoop(K, 3, inner), leaf))) == {I, K, N, M, T}
    # a symbol equal by id but not by name is another symbol (as `Symbol` equality says)
    other = Symbol(1, "j")
    assert _agree(ForLoop(I, 4, SetCell(OUT, (index_of(other),), Const(0.0)))) == {other}


def test_real_programs_agree() -> None:
    x = oc.ndarray(np.ones((4, 3), np.float32), batch_axes=1)
    h = x
    for i in range(3):
        h = oc.relu(oc.param(f"w{i}", output_dims=[3]) @ h)
    loss = oc.einsum("b|o=>o", h)
    ctx = oc.Context()
    code = [oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1, momentum=0.9)]
    prog, _, _ = ctx.lower_code(code, name="mlp3")
    assert _agree(prog.body) == set() and prog.static_args == ()
    data = oc.ndarray(np.arange(24, dtype=np.float32).reshape(6, 4), batch_axes=1)
    sliced = oc.relu(data.batch_slice(oc.static_index("batch")))
    prog2, _, _ = oc.Context().lower_code(sliced.forward, name="slice")
    statics = _agree(prog2.body)
    assert len(statics) == 1 and tuple(statics) == prog2.static_args
