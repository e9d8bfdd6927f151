"""CUDA register tiling of reductions (`cuda_tile`): from the user's side, matmuls with edges
and batched ones give NumPy's values and the untiled kernels' bits (``OCANNL_AST_CUDA_TILE``
``all`` against ``0``), their gradients too (against NumPy's formulas); the transformer step's losses match the C backend;
the kernel text makes fewer loads per output cell; small kernels stay as they were.

On the GPU where one is usable, else on the driver emulator (`cuda_device`)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import cuda_gemm, cuda_tile
from ocannl_ast.backends.cuda_backend import plan_cuda
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Const,
    DeclLocal,
    ForLoop,
    Get,
    GetLocal,
    LoopProgram,
    Precision,
    Seq,
    SetCell,
    SetLocal,
    Symbol,
    index_of,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import transformer_model as tm


@pytest.fixture(autouse=True)
def _no_shared_memory_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """The register tiles alone: contractions through shared memory (`cuda_gemm`) off."""
    monkeypatch.setenv(cuda_gemm.ENV, "0")


SHAPES = [(1, 1, 1), (5, 7, 3), (33, 65, 17), (4, 40, 9), (64, 8, 128)]  # (m, k, n)


def _matmul_run(a: np.ndarray, b: np.ndarray, spec: str, precision: str) -> tuple[np.ndarray, ...]:
    """The product and the gradients of sum(product * w) for a and b, on CUDA."""
    x = oc.param("x", init=a)
    y = oc.param("y", init=b)
    out = oc.einsum(spec, x, y)
    rng = np.random.default_rng(9)
    w = oc.ndarray(rng.standard_normal(np.einsum(spec.replace(";", ",").replace("=>", "->"), a, b).shape).astype(a.dtype), label="w")
    cells = spec.split("=>")[1]
    loss = oc.einsum(f"{cells};{cells}=>", out, w)  # a scalar: sum(out * w)
    ctx = oc.Context(backend="cuda", precision=precision)
    ctx.compile(oc.grad_update(loss))()
    return ctx.get(out), ctx.get(x.grad), ctx.get(y.grad), w.init_value  # type: ignore[return-value]


def _both_modes(monkeypatch: pytest.MonkeyPatch, *args: object) -> list[tuple[np.ndarray, ...]]:
    got = []
    for mode in ("0", "all"):
        monkeypatch.setenv(cuda_tile.ENV, mode)
        got.append(_matmul_run(*args))  # type: ignore[arg-type]
    return got


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_tiled_matmul_and_grads_match_numpy_and_untiled_bits(
        m: int, k: int, n: int, precision: str, monkeypatch: pytest.MonkeyPatch) -> None:
    dtype = np.float32 if precision == "float32" else np.float64
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    plain, tiled = _both_modes(monkeypatch, a, b, "ij;jk=>ik", precision)
    for p, t in zip(plain, tiled):
        assert p.tobytes() == t.tobytes()  # the same operations in the same order
    out, ga, gb, w = tiled
    tol = 1e-5 if precision == "float32" else 1e-12
    a64, b64, w64 = a.astype(np.float64), b.astype(np.float64), w.astype(np.float64)
    np.testing.assert_allclose(out, a64 @ b64, rtol=tol, atol=tol * k)
    np.testing.assert_allclose(ga, w64 @ b64.T, rtol=tol, atol=tol * n)
    np.testing.assert_allclose(gb, a64.T @ w64, rtol=tol, atol=tol * m)


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
def test_tiled_batched_matmul(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((3, 9, 20)).astype(np.float32)
    b = rng.standard_normal((3, 20, 6)).astype(np.float32)
    plain, tiled = _both_modes(monkeypatch, a, b, "bij;bjk=>bik", "float32")
    for p, t in zip(plain, tiled):
        assert p.tobytes() == t.tobytes()
    np.testing.assert_allclose(tiled[0], np.einsum("bij,bjk->bik", a, b), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
def test_transformer_step_tiled_matches_c(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tm.Config(vocab=20, d_model=16, heads=2, blocks=1, hidden=32, context=8, batch=4,
                    n_batches=2)
    ids, tgt = tm.data(cfg)
    losses: dict[str, list[float]] = {}
    weights = None
    for name, backend, mode in (("c", "c", "1"), ("tiled", "cuda", "all"),
                                ("plain", "cuda", "0")):
        monkeypatch.setenv(cuda_tile.ENV, mode)
        ctx = oc.Context(backend=backend)
        step, loss, weights = tm.build_ocannl(cfg, ids, tgt, ctx, weights)
        losses[name] = []
        for i in range(3):
            step(batch=i % cfg.n_batches)
            losses[name].append(float(ctx.get(loss).reshape(-1)[0]))
    assert losses["tiled"] == losses["plain"]  # bit for bit
    np.testing.assert_allclose(losses["tiled"], losses["c"], rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
def test_tiled_matrix_vector_product(monkeypatch: pytest.MonkeyPatch) -> None:
    """One output axis: 1 x 4 tiles (the vector's load is shared)."""
    rng = np.random.default_rng(6)
    a = rng.standard_normal((37, 50)).astype(np.float32)
    v = rng.standard_normal((50,)).astype(np.float32)
    plain, tiled = _both_modes(monkeypatch, a, v, "ij;j=>i", "float32")
    for p, t in zip(plain, tiled):
        assert p.tobytes() == t.tobytes()
    np.testing.assert_allclose(tiled[0], a.astype(np.float64) @ v, rtol=1e-5, atol=1e-5)


# ---- the kernel text (no device) ----------------------------------------------------------


def _matmul_prog(m: int, k: int, n: int) -> LoopProgram:
    i, j, r = Symbol(0, "i"), Symbol(1, "j"), Symbol(2, "k")
    a, b, c = Buffer(1, "a", (m, k)), Buffer(2, "b", (k, n)), Buffer(3, "c", (m, n))
    step = SetLocal("acc", Binary(BinOp.ADD, GetLocal("acc"), Binary(
        BinOp.MUL, Get(a, (index_of(i), index_of(r))), Get(b, (index_of(r), index_of(j))))))
    inner = Seq((DeclLocal("acc", Const(0.0)), ForLoop(r, k, step),
                 SetCell(c, (index_of(i), index_of(j)), GetLocal("acc"))))
    body = ForLoop(i, m, ForLoop(j, n, inner))
    return LoopProgram("mm", (c, a, b), (), body, Precision.FLOAT32)


def _loads(source: str) -> int:
    """Buffer reads (``a[`` or ``b[``) in the kernel text, once per line."""
    return sum(1 for ln in source.splitlines() if "a[" in ln or "b[" in ln)


def test_default_mode_tiles_large_matmuls_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(cuda_tile.ENV, raising=False)
    (big,) = plan_cuda(_matmul_prog(1024, 1024, 1024)).kernels
    assert big.threads == 1024 * 1024 // 16  # 4x4 cells a thread
    (small,) = plan_cuda(_matmul_prog(64, 64, 64)).kernels
    assert small.threads == 64 * 64  # too few threads left to tile: one cell a thread
    (short,) = plan_cuda(_matmul_prog(1024, 8, 1024)).kernels
    assert short.threads == 1024 * 1024  # a short reduction: not worth it
    monkeypatch.setenv(cuda_tile.ENV, "0")
    assert plan_cuda(_matmul_prog(1024, 1024, 1024)).kernels[0].threads == 1024 * 1024


def test_tiled_kernel_loads_each_operand_once_per_tile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Untiled: 2 loads a cell a step of k; tiled 4x4: 4 of a and 4 of b for 16 cells (0.5),
    columns interleaved (consecutive threads, consecutive columns) and stores guarded."""
    monkeypatch.setenv(cuda_tile.ENV, "0")
    plain = plan_cuda(_matmul_prog(33, 65, 17)).source
    monkeypatch.setenv(cuda_tile.ENV, "all")
    tiled = plan_cuda(_matmul_prog(33, 65, 17)).source
    assert _loads(plain) == 1  # one statement reading a and b, per cell
    assert _loads(tiled) == 8  # per 16 cells
    assert "+ 5 < 17" not in tiled and "+ 15 < 17" in tiled  # 5 tiles across: 3*5 may pass
    assert "4*" in tiled and "if (" in tiled


def test_tiled_kernels_compile_cleanly_with_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    from ocannl_ast.backends import cuda_nvrtc

    try:
        cuda_nvrtc.nvrtc_version()
    except oc.BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")
    monkeypatch.delenv(cuda_tile.ENV, raising=False)
    for prog in (_matmul_prog(1024, 1024, 1024), _matmul_prog(1023, 100, 4097)):
        plan = plan_cuda(prog)
        assert "l_ld" in plan.source  # tiled
        ptx, log = cuda_nvrtc.nvrtc_compile("mm", plan.source, "compute_90")
        assert log == "" and b".entry" in ptx


def test_bad_tile_mode_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CUDA_TILE", "yes")
    with pytest.raises(oc.BackendError, match="OCANNL_AST_CUDA_TILE must be 0, 1 or all"):
        cuda_tile.mode()
    monkeypatch.setenv("OCANNL_AST_CUDA_TILE", " ALL ")
    assert cuda_tile.mode() == "all"
