"""The gradient all-reduce reaches the update on every backend: a fake peer makes the
reduced gradients twice this rank's, so SGD with learning rate lr must move the params as
plain SGD with 2*lr does. On the C backend and on CUDA (the driver emulator where no GPU is
usable: device copies of the arena are read back and re-uploaded around the reduction).
The fake communicator is also what an NCCL communicator plugs into (the same protocol)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
import ocannl_ast.distributed as ocd
from ocannl_ast.distributed.comm import LocalComm
from ocannl_ast.distributed.world import World

BACKENDS_TESTS = Path(__file__).resolve().parents[1] / "backends"


class TripledPeer(LocalComm):
    """Rank 0 of 2 whose peer's gradients are 3x this rank's (sum = 4x, mean = 2x)."""

    size = 2

    def __init__(self) -> None:
        self.reduced: list[int] = []

    def allreduce_(self, buf: np.ndarray) -> None:
        self.reduced.append(buf.size)
        buf *= 4.0

    def barrier(self) -> None:
        pass


@pytest.fixture(params=["c", "cuda"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "c":
        yield "c"
        return
    pytest.importorskip("cuda.bindings", reason="the cuda extra (cuda-python) is needed")
    sys.path.insert(0, str(BACKENDS_TESTS))
    try:
        import cuda_emu
    finally:
        sys.path.remove(str(BACKENDS_TESTS))
    with cuda_emu.installed(cuda_emu.FakeDriver(tmp_path)):
        yield "cuda"


def _model() -> tuple[Any, list[Any]]:
    rng = np.random.default_rng(5)
    x = oc.ndarray(rng.normal(size=(6, 3)), batch_axes=1, label="x")
    y = oc.ndarray(rng.normal(size=(6, 2)), batch_axes=1, label="y")
    w = oc.param("w", input_dims=[3], output_dims=[2])
    b = oc.param("b", output_dims=[2], init=0.1)
    loss = oc.nn.mse(w @ x + b, y)
    return loss, [b, w]


def test_the_reduced_gradients_are_what_the_update_reads(backend: str) -> None:
    loss, ps = _model()
    comm = TripledPeer()
    ctx = oc.Context(backend=backend)
    step = ocd.data_parallel(ctx, loss, oc.sgd_update(loss, learning_rate=0.05),
                             world=World(comm, 10.0), check_every=0)
    ref = oc.Context(backend=backend)
    fused = ref.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
    start = [ctx.get(p) for p in ps]
    for _ in range(3):
        step()
        fused()
    assert comm.reduced == [step.arena.size] * 3 == [2 + 6] * 3
    for p, p0 in zip(ps, start, strict=True):
        assert np.abs(ctx.get(p) - p0).max() > 1e-3, f"{p.name} did not move"
        np.testing.assert_allclose(ctx.get(p), ref.get(p), rtol=1e-5, atol=1e-6)
