"""The virtualization pass on hand-built loop programs: what it may inline and what it
must not (a hazard would silently change values), checked by running both versions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ocannl_ast.backends.c_backend import compile_c
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Const,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    SetLocal,
    Stmt,
    Symbol,
    Unary,
    UnOp,
    index_of,
)
from ocannl_ast.lowering.virtualize import virtualize

N = 4
A = Buffer(1, "a", (N,))
B = Buffer(2, "b", (N,))
T = Buffer(3, "t", (N,))
OUT = Buffer(4, "out", (N,))
S = Buffer(5, "s", (1,))
_ids = iter(range(100, 10_000))


Cell = Callable[[tuple[IndexExpr, ...]], Expr]  #: a value as a function of the cell index


def _loop(write: Buffer, value: Cell, extent: int = N) -> Stmt:
    i = Symbol(next(_ids), "i")
    ix = (index_of(i),)
    return ForLoop(i, extent, SetCell(write, ix, value(ix)))


def _get(buf: Buffer) -> Cell:
    return lambda ix: Get(buf, ix)


def _prog(*stmts: Stmt) -> LoopProgram:
    bufs: dict[int, Buffer] = {}
    for s in stmts:
        _collect(s, bufs)
    return LoopProgram("vtest", tuple(bufs.values()), (), Seq(stmts), Precision.FLOAT64)


def _collect(s: Stmt, out: dict[int, Buffer]) -> None:
    match s:
        case Seq(stmts=stmts):
            for x in stmts:
                _collect(x, out)
        case ForLoop(body=body):
            _collect(body, out)
        case SetCell(buffer=b, value=v):
            out.setdefault(b.id, b)
            _collect_expr(v, out)
        case Fill(buffer=b):
            out.setdefault(b.id, b)
        case DeclLocal(init=v) | SetLocal(value=v):
            _collect_expr(v, out)
        case _:
            pass


def _collect_expr(e: Expr, out: dict[int, Buffer]) -> None:
    match e:
        case Get(buffer=b):
            out.setdefault(b.id, b)
        case Unary(arg=a):
            _collect_expr(a, out)
        case Binary(lhs=a, rhs=b):
            _collect_expr(a, out)
            _collect_expr(b, out)
        case _:
            pass


def _run(prog: LoopProgram, init: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
    arrays = [init.get(b.id, np.zeros(b.dims)).astype(np.float64).copy() for b in prog.buffers]
    compile_c(prog)(arrays)
    return {b.id: a for b, a in zip(prog.buffers, arrays, strict=True)}


def _check(prog: LoopProgram, keep: set[int], expect_virtual: set[int]) -> None:
    """Virtualize keeping `keep`; the kept buffers end bit-identical to the original."""
    out = virtualize(prog, frozenset(keep), {})
    assert set(out.virtual) == expect_virtual
    rng = np.random.default_rng(0)
    init = {b.id: rng.standard_normal(b.dims) for b in prog.buffers}
    ref, got = _run(prog, init), _run(out.prog, init)
    for k in keep:
        if k in ref:
            assert np.array_equal(ref[k], got[k]), k


def test_single_read_pointwise_is_inlined() -> None:
    prog = _prog(_loop(T, lambda ix: Unary(UnOp.EXP, Get(A, ix))),
                 _loop(OUT, lambda ix: Binary(BinOp.ADD, Get(T, ix), Get(B, ix))))
    _check(prog, {1, 2, 4}, {3})


def test_kept_buffer_is_not_inlined() -> None:
    prog = _prog(_loop(T, lambda ix: Unary(UnOp.EXP, Get(A, ix))),
                 _loop(OUT, _get(T)))
    _check(prog, {1, 2, 3, 4}, set())


def test_input_overwritten_before_the_reader_blocks_inlining() -> None:
    prog = _prog(_loop(T, lambda ix: Unary(UnOp.EXP, Get(A, ix))),
                 _loop(A, lambda ix: Const(7.0)),
                 _loop(OUT, _get(T)))
    _check(prog, {1, 2, 4}, set())


def test_in_place_reader_of_the_input_is_fine_but_shifted_is_not() -> None:
    ok = _prog(_loop(T, lambda ix: Binary(BinOp.MUL, Const(0.9), Get(A, ix))),
               _loop(A, lambda ix: Binary(BinOp.ADD, Get(T, ix), Get(B, ix))))
    _check(ok, {1, 2}, {3})
    i = Symbol(next(_ids), "i")
    shifted = _prog(
        _loop(T, lambda ix: Binary(BinOp.MUL, Const(0.9), Get(A, ix))),
        ForLoop(i, N - 1, SetCell(A, (index_of(i, 1, 1),),
                                  Binary(BinOp.ADD, Get(T, (index_of(i),)), Get(B, (index_of(i),))))))
    _check(shifted, {1, 2}, set())


def test_read_twice_is_kept_but_a_copy_is_inlined_everywhere() -> None:
    twice = _prog(_loop(T, lambda ix: Unary(UnOp.EXP, Get(A, ix))),
                  _loop(OUT, lambda ix: Binary(BinOp.MUL, Get(T, ix), Get(T, ix))))
    _check(twice, {1, 4}, set())
    copy = _prog(_loop(T, _get(A)),
                 _loop(OUT, lambda ix: Binary(BinOp.MUL, Get(T, ix), Get(T, ix))))
    _check(copy, {1, 4}, {3})


def test_broadcast_reader_counts_every_visit() -> None:
    i, j = Symbol(next(_ids), "i"), Symbol(next(_ids), "j")
    m = Buffer(6, "m", (3, N))
    prog = _prog(_loop(T, lambda ix: Unary(UnOp.EXP, Get(A, ix))),
                 ForLoop(i, 3, ForLoop(j, N, SetCell(m, (index_of(i), index_of(j)),
                                                     Get(T, (index_of(j),))))))
    _check(prog, {1, 6}, set())


def test_partial_or_repeated_writes_are_not_producers() -> None:
    partial = _prog(_loop(T, lambda ix: Unary(UnOp.EXP, Get(A, ix)), extent=N - 1),
                    _loop(OUT, _get(T)))
    _check(partial, {1, 4}, set())
    filled = _prog(Fill(T, 1.0), _loop(T, lambda ix: Unary(UnOp.EXP, Get(A, ix))),
                   _loop(OUT, _get(T)))
    _check(filled, {1, 4}, set())


def test_reduction_result_is_not_inlined_but_its_pointwise_input_is() -> None:
    k = Symbol(next(_ids), "k")
    reduce = Seq((DeclLocal("acc1", Const(0.0)),
                  ForLoop(k, N, SetLocal("acc1", Binary(BinOp.ADD, GetLocal("acc1"),
                                                        Get(T, (index_of(k),))))),
                  SetCell(S, (IndexExpr((), 0),), GetLocal("acc1"))))
    prog = _prog(_loop(T, lambda ix: Unary(UnOp.EXP, Get(A, ix))), reduce,
                 _loop(OUT, lambda ix: Binary(BinOp.MUL, Get(S, (IndexExpr((), 0),)),
                                              Get(A, ix))))
    _check(prog, {1, 4}, {3})


def test_constants_are_folded_only_when_not_written() -> None:
    prog = _prog(_loop(OUT, lambda ix: Binary(BinOp.MUL, Get(S, (IndexExpr((), 0),)),
                                              Get(A, ix))))
    out = virtualize(prog, frozenset({1, 4}), {5: 2.5})
    assert out.folded == {5} and all(b.id != 5 for b in out.prog.buffers)
    written = _prog(SetCell(S, (IndexExpr((), 0),), Const(1.0)),
                    _loop(OUT, lambda ix: Get(S, (IndexExpr((), 0),))))
    assert not virtualize(written, frozenset({1, 4, 5}), {5: 2.5}).folded


def _row_sum(write: Buffer, term: Callable[[Symbol, Symbol], Expr]) -> Stmt:
    """write[i] = sum_k term(i, k), as a local reduction."""
    i, k = Symbol(next(_ids), "i"), Symbol(next(_ids), "k")
    name = f"acc{next(_ids)}"
    step = SetLocal(name, Binary(BinOp.ADD, GetLocal(name), term(i, k)))
    return ForLoop(i, N, Seq((DeclLocal(name, Const(0.0)), ForLoop(k, N, step),
                              SetCell(write, (index_of(i),), GetLocal(name)))))


def _outer(a: Buffer, b: Buffer) -> Callable[[Symbol, Symbol], Expr]:
    return lambda i, k: Binary(BinOp.MUL, Get(a, (index_of(k),)), Get(b, (index_of(i),)))


def test_pointwise_reader_is_fused_into_the_reduction() -> None:
    prog = _prog(_row_sum(T, _outer(A, B)),
                 _loop(OUT, lambda ix: Unary(UnOp.TANH, Binary(BinOp.ADD, Get(T, ix),
                                                              Get(B, ix)))))
    _check(prog, {1, 2, 4}, {3})


def test_fusion_refused_when_the_reduction_reads_the_readers_output() -> None:
    prog = _prog(_row_sum(T, _outer(OUT, B)), _loop(OUT, _get(T)))
    _check(prog, {2, 4}, set())


def test_fusion_refused_when_an_input_changes_in_between() -> None:
    prog = _prog(_row_sum(T, _outer(A, B)), _loop(B, lambda ix: Const(7.0)),
                 _loop(OUT, lambda ix: Binary(BinOp.ADD, Get(T, ix), Get(B, ix))))
    _check(prog, {1, 2, 4}, set())


def test_fusion_refused_for_broadcast_or_second_reads() -> None:
    i, j = Symbol(next(_ids), "i"), Symbol(next(_ids), "j")
    m = Buffer(6, "m", (3, N))
    bcast = _prog(_row_sum(T, _outer(A, B)),
                  ForLoop(i, 3, ForLoop(j, N, SetCell(m, (index_of(i), index_of(j)),
                                                      Get(T, (index_of(j),))))))
    _check(bcast, {1, 2, 6}, set())
    twice = _prog(_row_sum(T, _outer(A, B)), _loop(OUT, _get(T)),
                  _loop(A, lambda ix: Binary(BinOp.MUL, Get(T, ix), Const(2.0))))
    _check(twice, {1, 2, 4}, set())
