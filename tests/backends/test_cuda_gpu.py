"""CUDA backend on a GPU (on the driver emulator without one): every op and the moons training step give
the C backend's values (<= 1e-5 relative in float32), params initialize bit for bit, the
resident data set is sliced on the device, and bad static arguments are refused."""

from __future__ import annotations

import cuda_cases as cc
import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends.c_backend import compile_c
from ocannl_ast.lowering.loop_ir import Precision

# Every test takes `cuda_device` (tests/backends/conftest.py): the real GPU where one is
# usable, else the CPU emulator of the driver (cuda_emu.py), so these assertions run in CI.
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cuda_device")]
RTOL = {Precision.FLOAT32: 1e-5, Precision.FLOAT64: 1e-12}


# the 16-bit storage precisions: tests/backends/test_half_precision.py (emulated CUDA vs C)
@pytest.mark.parametrize("precision", [Precision.FLOAT32, Precision.FLOAT64])
@pytest.mark.parametrize("op", cc.OPS, ids=lambda o: o.name)
def test_every_op_matches_c(op, precision: Precision) -> None:
    from ocannl_ast.backends import get_backend
    from ocannl_ast.backends.cuda_runtime import to_host

    dtype = np.float32 if precision is Precision.FLOAT32 else np.float64
    prog = cc.op_program(op, 1000, precision)
    ins = cc.op_inputs(op, 1000, dtype)
    want, got = np.zeros(1000, dtype), np.zeros(1000, dtype)
    compile_c(prog)([want, *ins])
    get_backend("cuda").compile(prog)([got, *ins])
    to_host(got)
    np.testing.assert_allclose(got, want, rtol=RTOL[precision], atol=1e-30)


def _train(case: dict, backend: str, steps: int) -> tuple[list[np.ndarray], list[float], list]:
    """`steps` training steps of `case` in a fresh context of `backend`: the initial params,
    the losses and the final params. Params are keyed by tensor identity (seed 001), so both
    backends must train the same tensors for their inits to be comparable."""
    ctx = oc.Context(backend=backend)
    step = ctx.compile(case["code"])
    params = [t for t in step.held_out if t.init_value is None and not t.label.startswith(
        "moons")]
    ctx.ensure_initialized(step.held_out)
    init = [ctx.get(p) for p in params]
    losses = []
    for s in range(steps):
        step(batch=s % case["n_batches"], step=s)
        losses.append(float(ctx.get(case["loss"])[0]))
    return init, losses, [ctx.get(p) for p in params]


def test_moons_step_matches_c() -> None:
    case = cc.moons_step()
    init_c, loss_c, final_c = _train(case, "c", 12)
    init_g, loss_g, final_g = _train(case, "cuda", 12)
    assert len(init_c) >= 6
    for a, b in zip(init_c, init_g):
        assert a.tobytes() == b.tobytes()  # threefry on the device: bit-identical init
    np.testing.assert_allclose(loss_g, loss_c, rtol=1e-5)
    for a, b in zip(final_c, final_g):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-7)


def test_conv_matches_numpy() -> None:
    y, ref = cc.conv()
    got = oc.Context(backend="cuda")
    r = got.compile(y.forward)
    r()
    np.testing.assert_allclose(got.get(y), ref, rtol=1e-4, atol=1e-5)


def test_set_get_round_trip_and_device_residency() -> None:
    x = oc.term("x", output_dims=[5])
    y = x * 2.0
    ctx = oc.Context(backend="cuda")
    r = ctx.compile(y.forward)
    ctx.set(x, np.arange(5.0))
    r()
    np.testing.assert_array_equal(ctx.get(y), 2.0 * np.arange(5.0))
    ctx.set(x, np.ones(5))  # a new host value is uploaded before the next run
    r()
    np.testing.assert_array_equal(ctx.get(y), np.full(5, 2.0))


def test_bad_batch_index_is_refused() -> None:
    case = cc.moons_step()
    ctx = oc.Context(backend="cuda")
    step = ctx.compile(case["code"])
    with pytest.raises(oc.RuntimeDataError, match="must lie in"):
        step(batch=case["n_batches"], step=0)
