"""Long CUDA reductions into few cells shared by a block (`cuda_reduce`): from the user's
side, column and row sums, a layer norm's gain gradient and bias gradients give NumPy's
values (to rounding: the block adds partial sums in a fixed tree, not one thread in k order)
and the same bits on every run; the kernel text uses the block sum only where it applies.

On the GPU where one is usable, else on the driver emulator (`cuda_device`), which runs a
kernel with barriers as coroutines (threads in forward and in reverse order: a race would
show as different results)."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import cuda_reduce
from ocannl_ast.errors import BackendError


def _sum(spec: str, a: np.ndarray, mode: str, monkeypatch: pytest.MonkeyPatch
         ) -> tuple[np.ndarray, bool]:
    monkeypatch.setenv(cuda_reduce.ENV, mode)
    x = oc.ndarray(a, label="x")
    y = oc.einsum(spec, x * x)
    ctx = oc.Context(backend="cuda")
    step = ctx.compile(y.forward)
    step()
    return ctx.get(y), "__syncthreads" in step.compiled.plan.source  # type: ignore[attr-defined]


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
@pytest.mark.parametrize("spec,shape", [
    ("b,t,f=>f", (4, 70, 40)),  # a column sum: cells contiguous (lanes along the cells)
    ("b,t,f=>b,t", (3, 5, 300)),  # a row sum: terms contiguous (lanes along k)
    ("i,j=>j", (1000, 3)),  # few cells, many terms
    ("i,j=>i", (2, 33)),  # fewer terms than lanes
])
def test_block_sums_match_numpy_and_repeat_their_bits(
        spec: str, shape: tuple[int, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    a = np.random.default_rng(len(spec)).standard_normal(shape).astype(np.float32)
    got, staged = _sum(spec, a, "all", monkeypatch)
    assert staged
    again, _ = _sum(spec, a, "all", monkeypatch)
    assert got.tobytes() == again.tobytes()
    plain, staged0 = _sum(spec, a, "0", monkeypatch)
    assert not staged0
    a64 = a.astype(np.float64)
    want = np.einsum(spec.replace(",", "").replace("=>", "->"), a64 * a64)
    np.testing.assert_allclose(got, want, rtol=2e-5)
    np.testing.assert_allclose(plain, want, rtol=2e-5)


@pytest.mark.gpu
@pytest.mark.usefixtures("cuda_device")
def test_layer_norm_gradients_match_the_c_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda_reduce.ENV, "all")
    rng = np.random.default_rng(2)
    xs = rng.standard_normal((6, 9, 16)).astype(np.float32)
    got = {}
    for backend in ("c", "cuda"):
        x = oc.ndarray(xs, batch_axes=2)
        ln = oc.nn.layer_norm()
        loss = oc.einsum("..b..|f=>", ln(x) * ln(x) * oc.ndarray(np.arange(16.0) / 16))
        ctx = oc.Context(backend=backend)
        ctx.compile(oc.grad_update(loss))()
        got[backend] = [ctx.get(loss)] + [ctx.get(p.grad) for p in loss.params()]
    for c, g in zip(got["c"], got["cuda"], strict=True):
        np.testing.assert_allclose(g, c, rtol=1e-4, atol=1e-5)


def test_the_block_sum_applies_to_long_reductions_into_few_cells_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda_reduce.ENV, "1")
    x = oc.ndarray(np.ones((512, 64), np.float32))  # 64 cells of 512 terms
    assert "ocannl_part" in oc.render(oc.einsum("i,j=>j", x * x).forward, backend="cuda")
    small = oc.ndarray(np.ones((8, 16), np.float32))
    assert "ocannl_part" not in oc.render(oc.einsum("i,j=>j", small * small).forward,
                                          backend="cuda")
    monkeypatch.setenv(cuda_reduce.ENV, "0")
    assert "ocannl_part" not in oc.render(oc.einsum("i,j=>j", x * x).forward, backend="cuda")


def test_the_kernels_compile_cleanly_with_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    from ocannl_ast.backends import cuda_nvrtc

    try:
        cuda_nvrtc.nvrtc_version()
    except BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")
    monkeypatch.setenv(cuda_reduce.ENV, "all")
    x = oc.ndarray(np.ones((40, 300), np.float32))
    for spec in ("i,j=>j", "i,j=>i"):
        src = oc.render(oc.einsum(spec, x * x).forward, backend="cuda")
        assert "ocannl_part" in src
        ptx, log = cuda_nvrtc.nvrtc_compile("red", src, "compute_90")
        assert log == "" and b".entry" in ptx


def test_an_unknown_mode_is_a_backend_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda_reduce.ENV, "maybe")
    with pytest.raises(BackendError, match="OCANNL_AST_CUDA_REDUCE"):
        cuda_reduce.mode()
