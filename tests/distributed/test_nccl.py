"""The NCCL path of data parallelism on the CUDA backend. Without a GPU: its plumbing, with a
fake NCCL binding (the functions of `ocannl_ast.distributed.nccl.Binding` over the CUDA
driver emulator's device memory) -- the gradient arena is one device allocation, gradients
are slices of it, the all-reduce runs on the routines' stream with no host copy, the update
reads the reduced values, and an NCCL failure on any rank is a DistributedError on every
rank. Against the real libnccl where the `nccl` extra is installed: its symbols resolve.
On a GPU (marker `gpu`): a real one-rank NCCL all-reduce."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
import ocannl_ast.distributed as ocd
from ocannl_ast.distributed import nccl
from ocannl_ast.distributed.comm import LocalComm
from ocannl_ast.distributed.world import World

BACKENDS_TESTS = Path(__file__).resolve().parents[1] / "backends"
ERRORS = {0: "no error", 2: "unhandled system error", 6: "remote process exited or there "
          "was a network error"}


class FakeNccl:
    """One rank of `nranks` whose peers each hold `peer_factor` x this rank's buffer: the
    sum is (1 + peer_factor * (nranks - 1)) x, the mean that over nranks. It runs on the
    emulator's memory after the work queued before it (stream order). `fail_with` makes the
    next all-reduce return that ncclResult_t, `async_error` is what ncclCommGetAsyncError
    reports."""

    def __init__(self, driver: Any, nranks: int = 1, peer_factor: float = 0.0) -> None:
        self.driver, self.nranks, self.peer_factor = driver, nranks, peer_factor
        self.reduced: list[tuple[int, int, int, int]] = []  #: (address, count, dtype, op)
        self.fail_with = 0
        self.async_error = 0
        self.init_error = 0  #: what ncclCommInitRank returns (1: no usable GPU)
        self.aborted = self.destroyed = 0
        self.uid = bytes(range(128))

    def get_version(self) -> tuple[int, int]:
        return 0, 22105

    def get_unique_id(self) -> tuple[int, bytes]:
        return 0, self.uid

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int) -> tuple[int, Any]:
        ok = nranks == self.nranks and 0 <= rank < nranks and unique_id == self.uid
        if self.init_error:
            return self.init_error, None
        return (0, object()) if ok else (4, None)

    def all_reduce(self, sendbuff: int, recvbuff: int, count: int, datatype: int, op: int,
                   comm: Any, stream: int) -> int:
        if self.fail_with:
            return self.fail_with
        ctype = {7: ctypes.c_float, 8: ctypes.c_double}[datatype]
        nbytes = count * ctypes.sizeof(ctype)
        if (sendbuff != recvbuff or comm is None or stream not in self.driver.streams
                or self.driver.find(recvbuff, nbytes) is None):
            return 4  # ncclInvalidArgument: not in place, not on a routine stream, or not device
        self.driver.synchronize_all()  # the grad kernels queued before it on the stream
        buf = np.ctypeslib.as_array((ctype * count).from_address(recvbuff))
        buf *= 1.0 + self.peer_factor * (self.nranks - 1)
        if op == nccl.AVG:
            buf /= self.nranks
        self.reduced.append((recvbuff, count, datatype, op))
        return 0

    def broadcast(self, sendbuff: int, recvbuff: int, count: int, datatype: int, root: int,
                  comm: Any, stream: int) -> int:
        return 0

    def comm_destroy(self, comm: Any) -> int:
        self.destroyed += 1
        return 0

    def comm_abort(self, comm: Any) -> int:
        self.aborted += 1
        return 0

    def get_error_string(self, result: int) -> str:
        return ERRORS.get(result, "invalid argument")

    def comm_get_async_error(self, comm: Any) -> tuple[int, int]:
        return 0, self.async_error


class PeerComm(LocalComm):
    """Rank 0 of 2 over a fake host communicator: the peer sends what `peer` makes of this
    rank's object (the same object by default: a peer that agrees)."""

    size = 2

    def __init__(self, peer: Callable[[Any], Any] = lambda obj: obj) -> None:
        self.peer = peer
        self.sent: list[Any] = []

    def allgather(self, obj: Any) -> list[Any]:
        self.sent.append(obj)
        return [obj, self.peer(obj)]


@pytest.fixture
def emu(tmp_path: Path) -> Iterator[Any]:
    pytest.importorskip("cuda.bindings", reason="the cuda extra (cuda-python) is needed")
    sys.path.insert(0, str(BACKENDS_TESTS))
    try:
        import cuda_emu
    finally:
        sys.path.remove(str(BACKENDS_TESTS))
    with cuda_emu.installed(cuda_emu.FakeDriver(tmp_path)) as driver:
        yield driver


def _model() -> tuple[Any, list[Any]]:
    rng = np.random.default_rng(7)
    x = oc.ndarray(rng.normal(size=(6, 3)), batch_axes=1, label="x")
    y = oc.ndarray(rng.normal(size=(6, 2)), batch_axes=1, label="y")
    w = oc.param("w", input_dims=[3], output_dims=[2])
    b = oc.param("b", output_dims=[2], init=0.1)
    return oc.nn.mse(w @ x + b, y), [b, w]


def _dp(loss: Any, comm: Any, lr: float, precision: str = "float32", **kw: Any
        ) -> ocd.DataParallelStep:
    return ocd.data_parallel(oc.Context(backend="cuda", precision=precision), loss,
                             oc.sgd_update(loss, learning_rate=lr), world=World(comm, 10.0),
                             check_every=0, **kw)


def _device_floats(address: int, count: int) -> np.ndarray:
    return np.ctypeslib.as_array((ctypes.c_float * count).from_address(address)).copy()


def test_the_gradients_are_slices_of_one_device_allocation(emu: Any) -> None:
    loss, ps = _model()
    fake = FakeNccl(emu, nranks=2, peer_factor=1.0)  # peers agree: the mean is the identity
    with nccl.using(fake):
        step = _dp(loss, PeerComm(), 0.05)
        step()
    assert step.reduce_path == "nccl"
    ((address, count, dtype, op),) = fake.reduced
    assert (count, dtype, op) == (step.arena.size, nccl.DTYPES[step.arena.dtype], nccl.AVG)
    block = emu.find(address)
    assert block is not None and (block.base, block.size) == (address, step.arena.nbytes)
    # what the grad kernels wrote is in that block, gradient after gradient by param name
    grads = np.concatenate([step.ctx.get(p.grad).ravel() for p in sorted(ps, key=lambda p:
                                                                           p.name)])
    np.testing.assert_array_equal(_device_floats(address, count), grads)
    assert np.abs(grads).max() > 0


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_the_update_reads_the_reduced_gradients_with_no_host_copy(emu: Any, precision: str
                                                                  ) -> None:
    """A peer with 3x the gradients: the mean is 2x, so SGD with lr moves the params as
    plain SGD with 2*lr; only the params' reads come back to the host."""
    loss, ps = _model()
    fake = FakeNccl(emu, nranks=2, peer_factor=3.0)
    ref = oc.Context(backend="cuda", precision=precision)
    fused = ref.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
    with nccl.using(fake):
        step = _dp(loss, PeerComm(), 0.05, precision)
        assert step.arena.dtype == np.dtype(precision)
        start = [step.ctx.get(p) for p in ps]
        step()
        fused()
        before = emu.stats.dtoh_bytes
        for _ in range(3):
            step()
            fused()
        assert emu.stats.dtoh_bytes == before  # the reduction never crossed to the host
    assert len(fake.reduced) == 4
    assert {r[2] for r in fake.reduced} == {nccl.DTYPES[np.dtype(precision)]}
    for p, p0 in zip(ps, start, strict=True):
        assert np.abs(step.ctx.get(p) - p0).max() > 1e-3, f"{p.name} did not move"
        np.testing.assert_allclose(step.ctx.get(p), ref.get(p), rtol=1e-5, atol=1e-6)


def test_a_world_of_one_with_nccl_forced_is_plain_training(emu: Any) -> None:
    loss, ps = _model()
    fake = FakeNccl(emu)
    ref = oc.Context(backend="cuda")
    fused = ref.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
    with nccl.using(fake):
        step = _dp(loss, LocalComm(), 0.1, nccl=True)
        for _ in range(2):
            step()
            fused()
    assert step.reduce_path == "nccl" and len(fake.reduced) == 2
    for p in ps:
        np.testing.assert_allclose(step.ctx.get(p), ref.get(p), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("where", ["here", "peer", "async"])
def test_an_nccl_failure_is_a_distributed_error_on_every_rank(emu: Any, where: str) -> None:
    loss, _ = _model()
    fake = FakeNccl(emu, nranks=2, peer_factor=1.0)
    failing = "ncclAllReduce returned 2 (unhandled system error)"
    comm = PeerComm()
    with nccl.using(fake):
        step = _dp(loss, comm, 0.05)
        if where == "peer":  # its all-reduce status (None: success) is an error
            comm.peer = lambda obj: failing if obj is None else obj
        else:  # it succeeds (a status is None or an error text)
            comm.peer = lambda obj: None if isinstance(obj, str) else obj
        fake.fail_with = 2 if where == "here" else 0
        fake.async_error = 6 if where == "async" else 0
        with pytest.raises(oc.DistributedError, match=r"ncclAllReduce failed on rank\(s\) "
                           r"\[\d\] of 2") as info:
            step()
    bad_rank = 1 if where == "peer" else 0
    assert f"rank(s) [{bad_rank}]" in str(info.value)
    assert "test_nccl.py" in str(info.value)  # located at the user's call
    assert fake.aborted == 1  # no kernel left waiting for the failed rank
    if where != "peer":  # the peer is told: it raises the same error
        assert comm.sent[-1] is not None and "ncclAllReduce" in comm.sent[-1]


def test_without_libnccl_auto_falls_back_and_forced_raises(emu: Any, monkeypatch:
                                                           pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl, "library_candidates", lambda: ["/nonexistent/libnccl.so.2"])
    nccl.load.cache_clear()
    try:
        loss, _ = _model()
        step = _dp(loss, PeerComm(), 0.05)
        assert step.reduce_path.startswith("host (NCCL unavailable: rank 0: ")
        step()  # the host-copy path still trains
        with pytest.raises(oc.DistributedError, match=r"nccl=True.*rank\(s\) \[0, 1\].*"
                           r"/nonexistent/libnccl.so.2.*ocannl_ast\[nccl\]"):
            _dp(_model()[0], PeerComm(), 0.05, nccl=True)
    finally:
        nccl.load.cache_clear()


def test_a_communicator_that_cannot_start_falls_back_unless_forced(emu: Any) -> None:
    """libnccl opens but ncclCommInitRank fails (no GPU NCCL can use, e.g. this emulator)."""
    fake = FakeNccl(emu, nranks=2)
    fake.init_error = 1
    with nccl.using(fake):
        loss, ps = _model()
        step = _dp(loss, PeerComm(), 0.05)
        assert step.reduce_path.startswith("host (NCCL set-up failed: ")
        start = [step.ctx.get(p) for p in ps]
        step()
        assert all(np.abs(step.ctx.get(p) - p0).max() > 0 for p, p0 in zip(ps, start,
                                                                             strict=True))
        with pytest.raises(oc.DistributedError, match=r"ncclCommInitRank failed on rank\(s\) "
                           r"\[0, 1\] of 2: rank 0: ncclCommInitRank returned 1"):
            _dp(_model()[0], PeerComm(), 0.05, nccl=True)
    assert fake.reduced == []


def test_the_communicator_refuses_what_nccl_cannot_reduce(emu: Any) -> None:
    fake = FakeNccl(emu)
    with nccl.using(fake):
        comm = nccl.NcclComm(World(LocalComm(), 10.0), fake)
        with pytest.raises(oc.DistributedError, match="float32/float64 buffers here, not int32"):
            comm.allreduce_(0, 4, np.dtype(np.int32), 0)
        comm.close()
    assert fake.destroyed == 1 and comm.comm is None


def test_nccl_argument_is_checked() -> None:
    loss, _ = _model()
    with pytest.raises(oc.ArgumentError, match="needs a CUDA context"):
        ocd.data_parallel(oc.Context(backend="c"), loss, oc.sgd_update(loss, learning_rate=0.1),
                          nccl=True)
    with pytest.raises(oc.ArgumentError, match="nccl must be True, False or None"):
        ocd.data_parallel(oc.Context(backend="c"), loss, oc.sgd_update(loss, learning_rate=0.1),
                          nccl="yes")


def _real_nccl() -> nccl.CffiBinding:
    try:
        return nccl.load()
    except oc.DistributedError as e:
        pytest.skip(f"libnccl is not installed (pip install '.[nccl]'): {e}")


def test_the_binding_resolves_against_the_real_libnccl() -> None:
    lib = _real_nccl()
    assert all(getattr(lib.lib, s) is not None for s in nccl.SYMBOLS)
    rc, version = lib.get_version()
    assert rc == 0 and version >= nccl.MIN_VERSION
    assert lib.get_error_string(0) == "no error"
    rc, uid = lib.get_unique_id()
    assert rc == 0 and len(uid) == 128 and any(uid)


def test_the_core_package_does_not_load_nccl() -> None:
    code = ("import sys, ocannl_ast, ocannl_ast.distributed\n"
            "assert 'ocannl_ast.distributed.nccl' not in sys.modules\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.gpu
def test_a_real_one_rank_nccl_all_reduce() -> None:
    lib = _real_nccl()
    from ocannl_ast.backends import get_backend

    try:
        get_backend("cuda").ensure_runtime()
    except oc.BackendError as e:
        pytest.skip(f"no usable GPU: {e}")
    loss, ps = _model()
    ref = oc.Context(backend="cuda")
    fused = ref.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
    with nccl.using(lib):
        step = _dp(loss, LocalComm(), 0.1, nccl=True)
        for _ in range(3):
            step()
            fused()
    assert step.reduce_path == "nccl"
    for p in ps:
        np.testing.assert_allclose(step.ctx.get(p), ref.get(p), rtol=1e-6, atol=1e-7)
