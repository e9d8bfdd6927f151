"""CUDA contractions through shared-memory tiles (`cuda_gemm`): from the user's side, matmuls
with edges, batched and transposed layouts, accumulating gradients and batch slices give
NumPy's values and the grid-stride kernels' bits (``OCANNL_AST_CUDA_GEMM`` ``all`` against
``0``); the transformer step's losses are the same bits either way; the kernel text stages
both factors in shared memory; contractions that do not fit keep their kernels.

On the GPU where one is usable, else on the driver emulator (`cuda_device`), which runs a
kernel with barriers as coroutines."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import cuda_gemm, cuda_tile
from ocannl_ast.errors import BackendError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import transformer_model as tm

SHAPES = [(1, 1, 1), (5, 7, 3), (33, 65, 17), (64, 16, 64), (70, 40, 130)]  # (m, k, n)


def _np_spec(spec: str) -> str:
    return spec.replace(",", "").replace(";", ",").replace("=>", "->")


def _run(spec: str, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, ...]:
    """The product and the gradients of sum(product * w) for a and b, on CUDA."""
    x = oc.param("x", init=a)
    y = oc.param("y", init=b)
    out = oc.einsum(spec, x, y)
    shape = np.einsum(_np_spec(spec), a, b).shape
    w = oc.ndarray(np.random.default_rng(5).standard_normal(shape).astype(a.dtype), label="w")
    cells = spec.split("=>")[1]
    loss = oc.einsum(f"{cells};{cells}=>", out, w)
    ctx = oc.Context(backend="cuda")
    step = ctx.compile(oc.grad_update(loss))
    step()
    staged = "__syncthreads" in step.compiled.plan.source  # type: ignore[attr-defined]
    # every product goes through the tiles (one of 1 x 1 x 1 lowers to no reduction loop)
    assert staged == (cuda_gemm.mode() == "all" and a.size > 1)
    return ctx.get(out), ctx.get(x.grad), ctx.get(y.grad), w.init_value  # type: ignore[return-value]


def _modes(monkeypatch: pytest.MonkeyPatch, *args: object) -> list[tuple[np.ndarray, ...]]:
    monkeypatch.setenv(cuda_tile.ENV, "0")
    got = []
    for mode in ("0", "all"):
        monkeypatch.setenv(cuda_gemm.ENV, mode)
        got.append(_run(*args))  # type: ignore[arg-type]
    return got


def _check(plain: tuple[np.ndarray, ...], tiled: tuple[np.ndarray, ...]) -> None:
    for p, t in zip(plain, tiled, strict=True):
        assert p.tobytes() == t.tobytes()  # the same operations in the same order


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_matmul_and_grads_match_numpy_and_the_grid_stride_bits(
        m: int, k: int, n: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    plain, tiled = _modes(monkeypatch, "ij;jk=>ik", a, b)
    _check(plain, tiled)
    out, ga, gb, w = (v.astype(np.float64) for v in tiled)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    np.testing.assert_allclose(out, a64 @ b64, rtol=1e-5, atol=1e-5 * k)
    np.testing.assert_allclose(ga, w @ b64.T, rtol=1e-5, atol=1e-5 * n)
    np.testing.assert_allclose(gb, a64.T @ w, rtol=1e-5, atol=1e-5 * m)


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
@pytest.mark.parametrize("spec,sa,sb", [
    ("b,i,k;b,k,j=>b,i,j", (3, 20, 24), (3, 24, 18)),  # batched
    ("i,k;j,k=>i,j", (40, 33), (50, 33)),  # both factors contiguous along K (x @ w.T)
    ("k,i;k,j=>i,j", (70, 20), (70, 36)),  # both along the rows (a weight gradient)
    ("b,t,h,d;b,s,h,d=>b,h,t,s", (2, 9, 3, 8), (2, 11, 3, 8)),  # attention scores
])
def test_layouts_match_numpy_and_the_grid_stride_bits(
        spec: str, sa: tuple[int, ...], sb: tuple[int, ...],
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(len(spec))
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    plain, tiled = _modes(monkeypatch, spec, a, b)
    _check(plain, tiled)
    want = np.einsum(_np_spec(spec), a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(tiled[0], want, rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
def test_a_batch_slice_and_accumulated_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    """x[batch] read at a static index, and a weight read twice (its gradient sums two
    contractions into one cell: the second adds to the first)."""
    rng = np.random.default_rng(3)
    xs = rng.standard_normal((3, 24, 20)).astype(np.float32)
    w0 = rng.standard_normal((17, 20)).astype(np.float32)
    monkeypatch.setenv(cuda_tile.ENV, "0")
    got = []
    for mode in ("0", "all"):
        monkeypatch.setenv(cuda_gemm.ENV, mode)
        data = oc.ndarray(xs, batch_axes=2)
        w = oc.param("w", init=w0)
        x = data.batch_slice(oc.static_index("batch"))
        h = oc.einsum("b|i;o,i=>b|o", x, w)
        h2 = oc.einsum("b|o;o,i=>b|i", h, w)
        loss = oc.einsum("b|i=>", h2 * h2)
        ctx = oc.Context(backend="cuda")
        step = ctx.compile(oc.grad_update(loss))
        step(batch=2)
        got.append((ctx.get(h2), ctx.get(w.grad)))
        src = step.compiled.plan.source  # type: ignore[attr-defined]
        assert src.count("__syncthreads();") == (0 if mode == "0" else 2 * 5)
    for p, t in zip(*got, strict=True):
        assert p.tobytes() == t.tobytes()
    x64, w64 = xs[2].astype(np.float64), w0.astype(np.float64)
    h64 = x64 @ w64.T
    h2_64 = h64 @ w64
    g2 = 2 * h2_64
    gw = h64.T @ g2 + (g2 @ w64.T).T @ x64
    np.testing.assert_allclose(got[1][0], h2_64, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(got[1][1], gw, rtol=1e-4, atol=1e-2)


def test_the_kernel_stages_both_factors_in_shared_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda_gemm.ENV, "1")
    x = oc.param("x", init=np.ones((128, 64), np.float32))
    y = oc.param("y", init=np.ones((64, 96), np.float32))
    src = oc.render(oc.einsum("ij;jk=>ik", x, y).forward, backend="cuda")
    assert src.count("__shared__") == 2 and src.count("__syncthreads();") == 2
    assert "ocannl_tile" in src
    monkeypatch.setenv(cuda_gemm.ENV, "0")
    src0 = oc.render(oc.einsum("ij;jk=>ik", x, y).forward, backend="cuda")
    assert "__shared__" not in src0


def test_small_contractions_keep_their_kernels(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda_gemm.ENV, "1")
    x = oc.param("x", init=np.ones((8, 8), np.float32))
    y = oc.param("y", init=np.ones((8, 8), np.float32))
    assert "__shared__" not in oc.render(oc.einsum("ij;jk=>ik", x, y).forward, backend="cuda")
    big = oc.param("big", init=np.ones((64, 64), np.float32))
    z = oc.param("z", init=np.ones((64, 64), np.float32))
    three = oc.einsum("ij;jk=>ik", big * big, z)
    src = oc.render(three.forward, backend="cuda")
    assert src.count("__shared__") == 2  # (big * big is its own tensor: a 2-factor nest)


def test_an_unknown_mode_is_a_backend_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda_gemm.ENV, "yes")
    with pytest.raises(BackendError, match="OCANNL_AST_CUDA_GEMM"):
        cuda_gemm.mode()


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
def test_transformer_step_losses_are_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tm.QUICK
    ids, tgt = tm.data(cfg)
    losses = []
    weights = None
    for mode in ("0", "all"):
        monkeypatch.setenv(cuda_gemm.ENV, mode)
        ctx = oc.Context(backend="cuda")
        step, loss, weights = tm.build_ocannl(cfg, ids, tgt, ctx, weights)
        got = []
        for i in range(3):
            step(batch=i % cfg.n_batches)
            got.append(ctx.get(loss).copy())
        losses.append(np.array(got))
        src = step.compiled.plan.source  # type: ignore[attr-defined]
        assert ("__syncthreads" in src) == (mode == "all")
        # products of three factors too (attention's output projection and its gradient):
        # the third staged beside the first, the product in the nest's association
        assert ("ocannl_zs" in src) == (mode == "all")
    assert losses[0].tobytes() == losses[1].tobytes()


def test_the_kernels_compile_cleanly_with_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    from ocannl_ast.backends import cuda_nvrtc

    try:
        cuda_nvrtc.nvrtc_version()
    except BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")
    monkeypatch.setenv(cuda_gemm.ENV, "all")
    for shape in ((1023, 100, 130), (64, 16, 64)):
        x = oc.param("x", init=np.ones(shape[:2], np.float32))
        y = oc.param("y", init=np.ones(shape[1:], np.float32))
        loss = oc.einsum("ij;jk=>", x, y)
        src = oc.render(oc.grad_update(loss), backend="cuda")
        assert src.count("__syncthreads();") >= 2
        ptx, log = cuda_nvrtc.nvrtc_compile("mm", src, "compute_90")
        assert log == "" and b".entry" in ptx
