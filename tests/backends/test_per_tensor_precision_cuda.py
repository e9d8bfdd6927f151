"""Per-tensor storage precisions on CUDA (`tensor.precisions`): a routine mixing bfloat16,
float16, float32 and uint32 buffers compiles cleanly with NVRTC, declares each buffer with
its own element type, and on the CUDA driver emulator gives the C backend's
values bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import cuda_nvrtc


def _model() -> tuple[oc.Tensor, oc.Tensor, oc.Tensor, oc.Tensor]:
    """ids (uint32) -> one_hot @ a bfloat16 table, times a float16 param; tanh stored in
    bfloat16 by oc.cast; a float32 result."""
    ids = oc.ndarray(np.array([[1, 0, 3], [2, 2, 1]]), batch_axes=1, label="ids",
                     precision="uint32")
    table = oc.param("table", output_dims=[5], input_dims=[4], precision="bfloat16")
    scale = oc.param("scale", output_dims=[5], precision="float16")
    emb = oc.einsum("b|s,v;v->d=>b|s,d", oc.nn.one_hot(ids, 4), table)
    h = oc.cast(oc.tanh(emb * scale), "bfloat16")
    return ids, table, scale, h * 3.0 + 0.25


def test_mixed_storage_cuda_source_compiles_with_nvrtc() -> None:
    try:
        cuda_nvrtc.nvrtc_version()
    except oc.BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")
    oc.set_seed(1)
    *_, y = _model()
    src = oc.render(y.forward, backend="cuda")
    assert "unsigned short* __restrict__ table" in src
    assert "uint32_t* __restrict__ ids" in src
    assert "float* __restrict__" in src
    ptx, log = cuda_nvrtc.nvrtc_compile("mixed", src, "compute_90")
    assert log == "" and b".entry" in ptx
    assert b"cvt.f32.f16" in ptx  # the float16 param read


def test_mixed_storage_cuda_matches_c_bit_for_bit(cuda_emu_driver: object) -> None:
    got = {}
    for backend in ("c", "cuda"):
        oc.set_seed(7)
        ctx = oc.Context(backend=backend)  # a naming epoch: the same param names, inits
        ids, table, scale, y = _model()
        loss = oc.einsum("b|s,d=>", y * y)
        ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)],
                    keep=[y])()
        got[backend] = [ctx.get(t) for t in (y, table, scale, ids)]
    for c_val, cuda_val in zip(got["c"], got["cuda"]):
        assert c_val.dtype == cuda_val.dtype
        np.testing.assert_array_equal(cuda_val, c_val)
    assert [v.dtype for v in got["c"]] == [np.float32, np.float32, np.float16, np.uint32]


def test_float32_master_weights_in_bfloat16_context_cuda_matches_c(
        cuda_emu_driver: object) -> None:
    """A bfloat16 routine with a float32 param (and its float32 gradient): Adam steps on
    CUDA give the C backend's values bit for bit."""
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((6, 5))
    got = {}
    for backend in ("c", "cuda"):
        oc.set_seed(3)
        ctx = oc.Context(backend=backend, precision="bfloat16")
        w = oc.param("w", output_dims=[3], input_dims=[5], precision="float32")
        y = oc.tanh(w @ oc.ndarray(x0, batch_axes=1, label="x"))
        loss = oc.einsum("b|o=>", y * y)
        step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])
        for _ in range(3):
            step()
        got[backend] = (ctx.get(w), ctx.get(loss))
    for c_val, cuda_val in zip(got["c"], got["cuda"]):
        np.testing.assert_array_equal(cuda_val, c_val)
    assert got["c"][0].dtype == np.float32
