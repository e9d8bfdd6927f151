"""Reduction reordering (`backends.c_reorder`) on hand-built loop IR: which nests are hoisted
and which keep their loops (the body reads the stored buffer, the init reads it, the local
array would be too big, strided reads, one output cell), and the same bits either way —
with NaN, infinities and signed zeros, enclosing loops, static arguments, a store that
reads other cells, max accumulators and a non-zero start, in both precisions."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from ocannl_ast.backends import c_reorder
from ocannl_ast.backends.c_backend import compile_c, render_c
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Const,
    DeclLocal,
    Expr,
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
    index_of,
)
from ocannl_ast.lowering.loop_verify import verify_program

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

I, J, B, T, S = Symbol(1, "i"), Symbol(2, "j"), Symbol(3, "b"), Symbol(4, "t"), Symbol(9, "s")
NI, NJ, NB = 5, 7, 23
HOISTED = "hoisted outside its"
ACC = GetLocal("acc")


def ix(*syms: Symbol) -> tuple[IndexExpr, ...]:
    return tuple(index_of(s) for s in syms)


def op(o: BinOp, a: Expr, b: Expr) -> Binary:
    return Binary(o, a, b)


C, X, Y = Buffer(1, "c", (NI, NJ)), Buffer(2, "x", (NB, NI)), Buffer(3, "y", (NB, NJ))
PRODUCT = op(BinOp.MUL, Get(X, ix(B, I)), Get(Y, ix(B, J)))


SUM_STEP, ZERO = op(BinOp.ADD, ACC, PRODUCT), Const(0.0)


def nest(step: Expr = SUM_STEP, init: Expr = ZERO, store: Expr = ACC,
         outer: tuple[tuple[Symbol, int], ...] = ((I, NI), (J, NJ))) -> Stmt:
    body: Stmt = Seq((DeclLocal("acc", init), ForLoop(B, NB, SetLocal("acc", step)),
                      SetCell(C, ix(*(s for s, _ in outer)), store)))
    for sym, extent in reversed(outer):
        body = ForLoop(sym, extent, body)
    return body


def _arrays(seed: int, dt: type) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x, y = rng.standard_normal((NB, NI)), rng.standard_normal((NB, NJ))
    x[3, 1], x[5, 2], y[7, 3], y[0, 0] = np.nan, np.inf, -np.inf, -0.0
    c = rng.standard_normal((NI, NJ))
    return [a.astype(dt) for a in (c, x, y)]


def _both(prog: LoopProgram, arrays: list[np.ndarray], tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch, static: tuple[int, ...] = ()
          ) -> tuple[list[np.ndarray], str]:
    """The arrays after a run with the reordering on; asserts the same bits as off."""
    verify_program(prog)
    runs, sources = [], []
    for flag in ("0", "1"):
        monkeypatch.setenv("OCANNL_AST_REORDER", flag)
        sources.append(render_c(prog))
        out = [a.copy() for a in arrays]
        compile_c(prog, cache_dir=tmp_path)(out, static)
        runs.append(out)
    assert HOISTED not in sources[0]
    for old, new in zip(*runs, strict=True):
        assert old.tobytes() == new.tobytes()
    return runs[1], sources[1]


@pytest.mark.parametrize("precision", [Precision.FLOAT32, Precision.FLOAT64])
def test_sum_of_products_is_hoisted_and_matches_numpy(
        precision: Precision, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dt = np.float32 if precision is Precision.FLOAT32 else np.float64
    arrays = _arrays(1, dt)
    arrays[1][3, 1] = arrays[1][5, 2] = arrays[2][7, 3] = 1.0  # finite for the comparison
    prog = LoopProgram("sum", (C, X, Y), (), nest(), precision)
    (c, x, y), src = _both(prog, arrays, tmp_path, monkeypatch)
    assert HOISTED in src
    want = x.astype(np.float64).T @ y.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5 if dt is np.float32 else 1e-12, atol=1e-5)


STEPS: dict[str, tuple[Expr, Expr, Expr]] = {  # step, init, store
    "max": (op(BinOp.MAX, ACC, PRODUCT), Const(-np.inf), ACC),
    "min_from_cell_init": (op(BinOp.MIN, PRODUCT, ACC), Const(3.5), ACC),
    "negative_zero_start": (op(BinOp.ADD, ACC, PRODUCT), Const(-0.0), ACC),
    "store_reads_its_cell": (op(BinOp.ADD, ACC, PRODUCT), Const(1.5),
                             op(BinOp.ADD, Get(C, ix(I, J)), ACC)),
    "store_reads_other_cells": (op(BinOp.ADD, ACC, PRODUCT), Const(0.0),
                                op(BinOp.SUB, ACC, Get(C, (index_of(I), index_of(J, -1, NJ - 1))))),
    "init_over_outer": (op(BinOp.ADD, ACC, PRODUCT), Get(X, (index_of(J), index_of(I))), ACC),
}


@pytest.mark.parametrize("name", sorted(STEPS))
@pytest.mark.parametrize("precision", [Precision.FLOAT32, Precision.FLOAT64])
def test_accumulator_forms_keep_their_bits(name: str, precision: Precision, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    step, init, store = STEPS[name]
    dt = np.float32 if precision is Precision.FLOAT32 else np.float64
    prog = LoopProgram(name, (C, X, Y), (), nest(step, init, store), precision)
    _, src = _both(prog, _arrays(2, dt), tmp_path, monkeypatch)
    assert HOISTED in src


REFUSED: dict[str, Stmt] = {
    "step_reads_the_output": nest(op(BinOp.ADD, ACC, Get(C, ix(I, J)))),
    "init_reads_the_output": nest(init=Get(C, ix(I, J))),
    # z[i, j, b]: 23 elements apart along the innermost output loop j
    "strided_inner_reads": nest(op(BinOp.ADD, ACC, Get(Buffer(4, "z", (NI, NJ, NB)),
                                                       ix(I, J, B)))),
    "one_output_cell": nest(outer=((I, 1), (J, 1))),
    "short_reduction": ForLoop(I, NI, ForLoop(J, NJ, Seq((
        DeclLocal("acc", ZERO), ForLoop(T, c_reorder.MIN_REDUCE - 1, SetLocal("acc", op(
            BinOp.ADD, ACC, Get(Buffer(4, "z", (NI, NJ, NB)), (index_of(I), index_of(J),
                                                               index_of(T)))))),
        SetCell(C, ix(I, J), op(BinOp.ADD, ACC, Get(C, ix(I, J)))))))),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_nests_keep_their_loops(name: str, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    z = Buffer(4, "z", (NI, NJ, NB))
    prog = LoopProgram(name, (C, X, Y, z), (), REFUSED[name])
    rng = np.random.default_rng(3)
    arrays = [*_arrays(3, np.float32), rng.standard_normal((NI, NJ, NB)).astype(np.float32)]
    _, src = _both(prog, arrays, tmp_path, monkeypatch)
    assert HOISTED not in src


def test_a_local_array_over_the_limit_keeps_the_loops(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    prog = LoopProgram("lim", (C, X, Y), (), nest())
    assert f"{HOISTED} {NI}x{NJ} output cells" in render_c(prog)
    monkeypatch.setattr(c_reorder, "MAX_CELLS", NI * NJ - 1)  # then the j loop alone fits
    assert f"{HOISTED} {NJ} output cells" in render_c(prog)
    _both(prog, _arrays(5, np.float32), tmp_path, monkeypatch)  # inside the i loop: same bits
    monkeypatch.setattr(c_reorder, "MAX_CELLS", NJ - 1)
    assert HOISTED not in render_c(prog)


def test_inside_an_enclosing_loop_with_a_static_argument(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``for t: c3[t, i, j] = sum_b x3[s, t, b, i] * y[b, j]``: the hoisted nest sits in a loop
    and reads through a static argument and the enclosing iterator."""
    c3, x3 = Buffer(5, "c3", (3, NI, NJ)), Buffer(6, "x3", (2, 3, NB, NI))
    step = op(BinOp.ADD, ACC, op(BinOp.MUL, Get(x3, ix(S, T, B, I)), Get(Y, ix(B, J))))
    inner = Seq((DeclLocal("acc", Const(0.0)), ForLoop(B, NB, SetLocal("acc", step)),
                 SetCell(c3, ix(T, I, J), ACC)))
    body = ForLoop(T, 3, ForLoop(I, NI, ForLoop(J, NJ, inner)))
    prog = LoopProgram("encl", (c3, x3, Y), (S,), body)
    rng = np.random.default_rng(4)
    arrays = [np.zeros((3, NI, NJ), np.float32),
              rng.standard_normal((2, 3, NB, NI)).astype(np.float32),
              rng.standard_normal((NB, NJ)).astype(np.float32)]
    (c, x, y), src = _both(prog, arrays, tmp_path, monkeypatch, static=(1,))
    assert HOISTED in src
    want = np.einsum("tbi,bj->tij", x[1].astype(np.float64), y.astype(np.float64))
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)
