"""The loop-IR passes that decide once per unit or extend what they checked: scalarizing
several buffers of one unit in one rebuild, fusion extending a merged nest's independence
and parallel safety instead of checking the whole again, unique buffer names in lowering,
loop scopes in `free_symbols`. Each is compared with what the whole check decides, and the
programs are compiled to compare the bits."""

# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import shutil

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends.c_backend import compile_c
from ocannl_ast.lowering.fuse_nests import fuse_nests
from ocannl_ast.lowering.fuse_rows import fuse_rows
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Const,
    DeclLocal,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    Stmt,
    Symbol,
    SymbolValue,
    Unary,
    UnOp,
    index_of,
)
from ocannl_ast.lowering.parallel import extend_safety, parallel_safe, safety
from ocannl_ast.lowering.scalarize import scalarize
from ocannl_ast.lowering.walk import free_symbols, stmt_nodes

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

_ids = iter(range(7000, 1_000_000))
N = 6
X, OUT = Buffer(101, "x", (N, N)), Buffer(102, "out", (N, N))
T0, T1, T2 = (Buffer(110 + k, f"t{k}", (N, N)) for k in range(3))


def _sym(name: str = "i") -> Symbol:
    return Symbol(next(_ids), name)


def _run(prog: LoopProgram, init: dict[int, np.ndarray]) -> dict[int, bytes]:
    arrays = [init[b.id].copy() for b in prog.buffers]
    compile_c(prog)(arrays)
    return {b.id: a.tobytes() for b, a in zip(prog.buffers, arrays, strict=True)}


def _inputs(bufs: tuple[Buffer, ...], seed: int) -> dict[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {b.id: rng.normal(size=b.dims).astype(np.float32) for b in bufs}


def _prog(*stmts: Stmt, bufs: tuple[Buffer, ...]) -> LoopProgram:
    return LoopProgram("reuse", bufs, (), Seq(stmts), Precision.FLOAT32)


# ---- scalarize: every local of a unit decided first, then one rebuild -------------------


def _three_locals_unit() -> Stmt:
    """for i, j: { t0 = exp(x); t1 = t0 * 2; t2 = t1 - t0; out = t2 * t1 + t0 }."""
    i, j = _sym("i"), _sym("j")
    ix = (index_of(i), index_of(j))
    t0, t1, t2 = (Get(t, ix) for t in (T0, T1, T2))
    body = Seq((SetCell(T0, ix, Unary(UnOp.EXP, Get(X, ix))),
                SetCell(T1, ix, Binary(BinOp.MUL, t0, Const(2.0))),
                SetCell(T2, ix, Binary(BinOp.SUB, t1, t0)),
                SetCell(OUT, ix, Binary(BinOp.ADD, Binary(BinOp.MUL, t2, t1), t0))))
    return ForLoop(i, N, ForLoop(j, N, body))


def test_several_buffers_of_one_unit_become_locals_with_the_same_bits() -> None:
    # a local already named v_t1 elsewhere: the new one takes the next free name
    other = ForLoop(k := _sym("k"), N, Seq((DeclLocal("v_t1", Const(1.0)),
                                             SetCell(OUT, (index_of(k), index_of(k)),
                                                     Binary(BinOp.ADD, GetLocal("v_t1"),
                                                            Get(OUT, (index_of(k),
                                                                      index_of(k))))))))
    prog = _prog(_three_locals_unit(), other, bufs=(X, T0, T1, T2, OUT))
    out = scalarize(prog, frozenset({X.id, OUT.id}), frozenset())
    assert out.buffers == frozenset({T0.id, T1.id, T2.id})
    assert [b.id for b in out.prog.buffers] == [X.id, OUT.id]
    decls = [x.name for x in stmt_nodes(out.prog.body) if isinstance(x, DeclLocal)]
    assert decls == ["v_t0", "v_t1_1", "v_t2", "v_t1"]
    assert not any(isinstance(x, SetCell) and x.buffer.id in out.buffers
                   for x in stmt_nodes(out.prog.body))
    init = _inputs(prog.buffers, 0)
    assert _run(prog, init)[OUT.id] == _run(out.prog, init)[OUT.id]
    expected = np.exp(init[X.id].astype(np.float64))
    got = np.frombuffer(_run(out.prog, init)[OUT.id], np.float32).reshape(N, N)
    diag = np.eye(N, dtype=bool)
    t1 = expected * 2
    ref = (t1 - expected) * t1 + expected
    np.testing.assert_allclose(got[~diag], ref[~diag], rtol=1e-5)


def test_a_buffer_read_outside_its_writes_block_stays_a_buffer() -> None:
    """t0 is written in one inner loop and read in the next (outside the write's block),
    t1 lives in one block: only t1 becomes a local."""
    i, j, j2 = _sym("i"), _sym("j"), _sym("j")
    ix, ix2 = (index_of(i), index_of(j)), (index_of(i), index_of(j2))
    write = ForLoop(j, N, Seq((SetCell(T0, ix, Unary(UnOp.EXP, Get(X, ix))),
                               SetCell(T1, ix, Binary(BinOp.MUL, Get(T0, ix), Const(3.0))),
                               SetCell(T2, ix, Binary(BinOp.ADD, Get(T1, ix), Const(1.0))))))
    read = ForLoop(j2, N, SetCell(OUT, ix2, Binary(BinOp.ADD, Get(T0, ix2), Get(T2, ix2))))
    prog = _prog(ForLoop(i, N, Seq((write, read))), bufs=(X, T0, T1, T2, OUT))
    out = scalarize(prog, frozenset({X.id, OUT.id}), frozenset())
    assert out.buffers == frozenset({T1.id})
    init = _inputs(prog.buffers, 1)
    assert _run(prog, init)[OUT.id] == _run(out.prog, init)[OUT.id]


def test_a_buffer_read_before_its_write_or_reading_itself_stays_a_buffer() -> None:
    i, j = _sym("i"), _sym("j")
    ix = (index_of(i), index_of(j))
    body = Seq((SetCell(OUT, ix, Get(T0, ix)),  # reads what the previous run left
                SetCell(T0, ix, Get(X, ix)),
                SetCell(T1, ix, Binary(BinOp.ADD, Get(T1, ix), Get(X, ix))),  # accumulates
                SetCell(OUT, ix, Binary(BinOp.ADD, Get(OUT, ix), Get(T1, ix)))))
    prog = _prog(ForLoop(i, N, ForLoop(j, N, body)), bufs=(X, T0, T1, OUT))
    assert scalarize(prog, frozenset({X.id, OUT.id}), frozenset()).buffers == frozenset()


# ---- fusion: a merged nest's facts extended one part at a time ------------------------


M = Buffer(120, "m", (N + 1,))
Y = Buffer(121, "y", (N,))


def _row(dst: Buffer, value: object, i: Symbol) -> Stmt:
    j = _sym("j")
    assert callable(value)
    return ForLoop(j, N, SetCell(dst, (index_of(i), index_of(j)), value(index_of(i),
                                                                       index_of(j))))


@pytest.mark.parametrize("case", ["safe", "reads_next_row", "writes_two_cells",
                                  "earlier_read_of_a_later_write"])
def test_extended_safety_is_the_whole_nests_safety(case: str) -> None:
    i = _sym("i")
    a = Seq((_row(T0, lambda r, c: Get(X, (r, c)), i),
             SetCell(M, (index_of(i),), Get(X, (index_of(i), IndexExpr((), 0))))))
    if case == "safe":  # reads the row's result at the written cell
        b: Stmt = _row(T1, lambda r, c: Binary(BinOp.ADD, Get(X, (r, c)), Get(M, (r,))), i)
    elif case == "reads_next_row":
        b = _row(T1, lambda r, c: Get(M, (index_of(i, 1, 1),)), i)
    elif case == "writes_two_cells":  # m[i] and m[i + 1]
        b = SetCell(M, (index_of(i, 1, 1),), Const(0.0))
    else:  # a reads y[0] in every row, b writes y[i]: a row reads another row's cell
        a = Seq((*a.stmts, SetCell(T2, (index_of(i), IndexExpr((), 0)), Get(Y, (IndexExpr((),
                                                                                       0),)))))
        b = SetCell(Y, (index_of(i),), SymbolValue(i))
    whole = ForLoop(i, N, Seq((*a.stmts, b)))
    known = safety(ForLoop(i, N, a))
    assert known is not None
    ext = extend_safety(known, b, ((i, N),))
    full = safety(whole)
    assert (ext is None) == (full is None) == (not parallel_safe(whole))
    assert (case == "safe") == (full is not None)
    if ext is not None and full is not None:
        assert ext.writes == full.writes and ext.reads == full.reads


@pytest.mark.parametrize("shift", [0, 1])
def test_row_fusion_checks_a_new_part_against_the_merged_group(shift: int) -> None:
    """Three row nests: the first two merge (their safety kept), the third is checked
    against both: reading the first's row result of its own row it merges too, of the next
    row (`shift` 1) it stays apart."""
    i1, i2, i3 = _sym("i"), _sym("i"), _sym("i")
    k1 = _sym("k")
    first = ForLoop(i1, N, Seq((_row(T0, lambda r, c: Get(X, (r, c)), i1),
                                SetCell(M, (index_of(i1),), Get(X, (index_of(i1),
                                                                     IndexExpr((), 0)))))))
    second = ForLoop(i2, N, _row(T1, lambda r, c: Binary(BinOp.MUL, Get(X, (r, c)),
                                                         Get(M, (r,))), i2))
    third = ForLoop(i3, N, ForLoop(k1, N, SetCell(OUT, (index_of(i3), index_of(k1)), Binary(
        BinOp.ADD, Get(X, (index_of(i3), index_of(k1))), Get(M, (index_of(i3, 1, shift),))))))
    prog = _prog(first, second, third, bufs=(X, T0, T1, M, OUT))
    out = fuse_rows(prog)
    assert out.changed == (2 if shift == 0 else 1)
    init = _inputs(prog.buffers, 2)
    assert _run(prog, init) == _run(out.prog, init)


@pytest.mark.parametrize("hazard", [False, True])
def test_pointwise_fusion_checks_a_new_nest_against_the_whole_group(hazard: bool) -> None:
    """x -> t0 -> t1 -> x': the last nest writes x, which the first reads; at the same cell
    the three merge, one cell over the first would read a cell another iteration wrote."""
    xs = Buffer(130, "xs", (N + 1, N))

    def nest(dst: Buffer, value: object, shift: int = 0) -> Stmt:
        i, j = _sym("i"), _sym("j")
        assert callable(value)
        return ForLoop(i, N, ForLoop(j, N, SetCell(dst, (index_of(i, 1, shift), index_of(j)),
                                                   value(index_of(i), index_of(j)))))

    prog = _prog(nest(T0, lambda r, c: Unary(UnOp.EXP, Get(xs, (r, c)))),
                 nest(T1, lambda r, c: Binary(BinOp.MUL, Get(T0, (r, c)), Const(0.5))),
                 nest(xs, lambda r, c: Get(T1, (r, c)), shift=1 if hazard else 0),
                 bufs=(xs, T0, T1))
    out = fuse_nests(prog)
    assert out.changed == (1 if hazard else 2)
    init = _inputs(prog.buffers, 3)
    assert _run(prog, init) == _run(out.prog, init)


# ---- lowering's names and the routine's static arguments -------------------------------


def test_buffer_names_are_unique_in_order_of_first_use(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    """Every buffer named after its tensor, a taken name followed by the first free
    ``_<k>`` suffix in order of first use (the param "add_2" comes after the op add_2)."""
    monkeypatch.setenv("OCANNL_AST_VIRTUALIZE", "0")  # (keep every buffer)
    monkeypatch.setenv("OCANNL_AST_SCHEDULE", "0")
    x = oc.ndarray(np.ones((2, 3), np.float32), batch_axes=1)
    h = x
    for k in range(5):
        h = oc.relu(h + float(k))
    h = h + oc.param("add_2", output_dims=[3])
    prog, _, _ = oc.Context().lower_code([oc.grad_update(oc.einsum("b|o=>o", h))],
                                         name="names")
    names = [b.name for b in prog.buffers]
    assert len(names) == len(set(names))
    assert [n for n in names if n.split("_")[0] in ("add", "relu") and "grad" not in n] == [
        "add", "relu", "add_1", "relu_1", "add_2", "relu_2", "add_3", "relu_3", "add_4",
        "relu_4", "add_5", "add_2_1"]


def test_free_symbols_with_an_inner_loop_reusing_a_symbol() -> None:
    k, s = _sym("k"), _sym("s")
    use = SetCell(Y, (index_of(k),), SymbolValue(s))
    inner = ForLoop(k, 2, use)
    assert free_symbols(ForLoop(k, 3, Seq((inner, use)))) == {s}
    assert free_symbols(Seq((ForLoop(k, 3, inner), use))) == {k, s}
