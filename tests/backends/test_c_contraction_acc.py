"""Contraction kernels for accumulating nests and 3-operand products: the `=+` form that
starts from the cell (``acc = c[..]; acc += x*y; c[..] = acc``: input gradients, gradients
several readers add into), a third factor constant over the reduction (scaled after the
call), and, from the user's side, models whose gradients take these paths checked against
NumPy / finite differences."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
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
    Seq,
    SetCell,
    SetLocal,
    Symbol,
    index_of,
)
from ocannl_ast.lowering.loop_verify import verify_program

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

I, J, K = Symbol(1, "i"), Symbol(2, "j"), Symbol(3, "k")
M, N, KK = 37, 45, 41
CALL = "if (ocannl_mm_run_"
C, A, B = Buffer(1, "c", (M, N)), Buffer(2, "a", (M, KK)), Buffer(3, "b", (KK, N))
E = Buffer(4, "e", (M, N))


def ix(*syms: Symbol) -> tuple[IndexExpr, ...]:
    return tuple(index_of(s) for s in syms)


def add(a: Expr, b: Expr) -> Binary:
    return Binary(BinOp.ADD, a, b)


def mul(a: Expr, b: Expr) -> Binary:
    return Binary(BinOp.MUL, a, b)


def _nest(init: Expr, term: Expr, store: SetCell | None = None) -> ForLoop:
    body = Seq((DeclLocal("acc", init),
                ForLoop(K, KK, SetLocal("acc", add(GetLocal("acc"), term))),
                store or SetCell(C, ix(I, J), GetLocal("acc"))))
    return ForLoop(I, M, ForLoop(J, N, body))


def _data(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in ((M, N), (M, KK), (KK, N), (M, N))]


def _run(prog: LoopProgram, arrays: list[np.ndarray], cache: Path) -> None:
    verify_program(prog)
    compile_c(prog, cache_dir=cache)(arrays, ())


AB = mul(Get(A, ix(I, K)), Get(B, ix(K, J)))


@pytest.mark.parametrize("term", ["ab", "ba"])
def test_accumulation_from_the_cell_is_a_kernel_call(term: str, tmp_path: Path) -> None:
    t = AB if term == "ab" else mul(Get(B, ix(K, J)), Get(A, ix(I, K)))
    prog = LoopProgram("accc", (C, A, B), (), _nest(Get(C, ix(I, J)), t))
    src = render_c(prog)
    assert CALL in src and "c += a * b" in src
    c0, a, b, _ = _data(1)
    c = c0.copy()
    _run(prog, [c, a, b], tmp_path)
    np.testing.assert_allclose(c, c0 + a.astype(np.float64) @ b, rtol=0, atol=1e-5 * KK)


def test_start_from_another_cell_keeps_the_loops(tmp_path: Path) -> None:
    # acc = e[i, j] (not the stored cell): not c += a b, so no kernel call
    prog = LoopProgram("other", (C, A, B, E), (), _nest(Get(E, ix(I, J)), AB))
    assert CALL not in render_c(prog)
    c0, a, b, e = _data(2)
    c = c0.copy()
    _run(prog, [c, a, b, e], tmp_path)
    np.testing.assert_allclose(c, e + a.astype(np.float64) @ b, rtol=0, atol=1e-5 * KK)


def test_start_from_a_transposed_cell_keeps_the_loops() -> None:
    sq = Buffer(1, "c", (M, M))
    b2 = Buffer(3, "b", (KK, M))
    term = mul(Get(A, ix(I, K)), Get(b2, ix(K, J)))
    body = Seq((DeclLocal("acc", Get(sq, ix(J, I))),
                ForLoop(K, KK, SetLocal("acc", add(GetLocal("acc"), term))),
                SetCell(sq, ix(I, J), GetLocal("acc"))))
    prog = LoopProgram("tr", (sq, A, b2), (), ForLoop(I, M, ForLoop(J, M, body)))
    assert CALL not in render_c(prog)


def test_factor_constant_over_k_scales_after_the_call(tmp_path: Path) -> None:
    term = mul(mul(Get(A, ix(I, K)), Get(B, ix(K, J))), Get(E, ix(I, J)))
    prog = LoopProgram("scale", (C, A, B, E), (), _nest(Const(0.0), term))
    src = render_c(prog)
    assert CALL in src and "c = e * (a * b)" in src
    _, a, b, e = _data(3)
    c = np.full((M, N), np.nan, np.float32)
    _run(prog, [c, a, b, e], tmp_path)
    np.testing.assert_allclose(c, e * (a.astype(np.float64) @ b), rtol=0, atol=1e-5 * KK * 4)


def test_accumulating_scaled_product_keeps_the_loops(tmp_path: Path) -> None:
    term = mul(mul(Get(A, ix(I, K)), Get(B, ix(K, J))), Get(E, ix(I, J)))
    prog = LoopProgram("scacc", (C, A, B, E), (), _nest(Get(C, ix(I, J)), term))
    assert CALL not in render_c(prog)
    c0, a, b, e = _data(4)
    c = c0.copy()
    _run(prog, [c, a, b, e], tmp_path)
    np.testing.assert_allclose(c, c0 + e * (a.astype(np.float64) @ b), rtol=0,
                               atol=1e-5 * KK * 4)


# ---- from the user's side ----------------------------------------------------------------


def test_gradient_of_an_input_read_twice_matches_numpy() -> None:
    # y = x W1 + x W2 (two readers of x): x.grad = g W1^T + g W2^T, the second `=+`
    rng = np.random.default_rng(5)
    xs, w1, w2, g = (rng.standard_normal(s) for s in ((48, 40), (40, 36), (40, 36), (48, 36)))
    x = oc.param("x", output_dims=[48, 40], init=xs)
    y = (oc.einsum("ij;jk=>ik", x, oc.ndarray(w1)) + oc.einsum("ij;jk=>ik", x, oc.ndarray(w2)))
    loss = oc.einsum("ij;ij=>", y, oc.ndarray(g))
    src = oc.render(oc.grad_update(loss))
    assert src.count(CALL) >= 2, "both input-gradient products run as kernel calls"
    ctx = oc.Context(precision="float64")
    ctx.compile(oc.grad_update(loss))()
    np.testing.assert_allclose(ctx.get(x.grad), g @ w1.T + g @ w2.T, rtol=1e-12, atol=1e-12)


def test_attention_gradients_against_finite_differences() -> None:
    rng = np.random.default_rng(6)
    layer = oc.nn.multi_head_attention(2, 4, causal=True)
    weights = rng.normal(size=(6, 8))  # one sequence of 6 positions, 8 features
    oc.testing.check_grads(lambda x: oc.einsum("s,f;s,f=>", layer(x), oc.ndarray(weights)),
                           [rng.normal(size=(6, 8))])
