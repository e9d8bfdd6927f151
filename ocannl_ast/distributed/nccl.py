"""NCCL for the CUDA backend: a thin cffi binding (ABI mode: the library is opened, nothing is
compiled) over libnccl, `NcclComm` (sum/mean all-reduce and broadcast of device buffers, in
place, on the routines' stream) and `DeviceArena`, the CUDA context's gradient arena as ONE
device allocation that one ncclAllReduce averages. Input: a `World` (its host communicator
carries NCCL's unique id and every rank's status), the host arena and its views. Output: the
device-side reduction `data_parallel` calls. libnccl comes from $OCANNL_AST_NCCL_LIB, the
`nvidia-nccl-cu12` wheel (the `nccl` extra) or the loader's path (LD_LIBRARY_PATH)."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import weakref
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..errors import DistributedError, user_span
from .world import World

CDEF = """
typedef struct { char internal[128]; } ncclUniqueId;
typedef struct ncclComm* ncclComm_t;
int ncclGetVersion(int* version);
int ncclGetUniqueId(ncclUniqueId* uniqueId);
int ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
int ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, int datatype, int op,
                  ncclComm_t comm, void* stream);
int ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, int datatype, int root,
                  ncclComm_t comm, void* stream);
int ncclCommDestroy(ncclComm_t comm);
int ncclCommAbort(ncclComm_t comm);
const char* ncclGetErrorString(int result);
int ncclCommGetAsyncError(ncclComm_t comm, int* asyncError);
"""
#: every symbol the binding calls (all resolved when the library is opened)
SYMBOLS = ("ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclAllReduce",
           "ncclBroadcast", "ncclCommDestroy", "ncclCommAbort", "ncclGetErrorString",
           "ncclCommGetAsyncError")
SUCCESS, IN_PROGRESS = 0, 7  #: ncclResult_t values
SUM, AVG = 0, 4  #: ncclRedOp_t values (ncclAvg: NCCL >= 2.10)
DTYPES = {np.dtype(np.float32): 7, np.dtype(np.float64): 8}  #: ncclFloat32, ncclFloat64
MIN_VERSION = 21000  #: ncclAvg
INSTALL_HINT = ("pip install 'ocannl_ast[nccl]' (the nvidia-nccl-cu12 wheel), or point "
                "$OCANNL_AST_NCCL_LIB at libnccl.so.2")


class Binding(Protocol):
    """The NCCL calls used, each returning the ncclResult_t first (as cuda-python does);
    buffers and streams are addresses. A fake implements this over emulated memory."""

    def get_version(self) -> tuple[int, int]: ...
    def get_unique_id(self) -> tuple[int, bytes]: ...
    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int) -> tuple[int, Any]: ...
    def all_reduce(self, sendbuff: int, recvbuff: int, count: int, datatype: int, op: int,
                   comm: Any, stream: int) -> int: ...
    def broadcast(self, sendbuff: int, recvbuff: int, count: int, datatype: int, root: int,
                  comm: Any, stream: int) -> int: ...
    def comm_destroy(self, comm: Any) -> int: ...
    def comm_abort(self, comm: Any) -> int: ...
    def get_error_string(self, result: int) -> str: ...
    def comm_get_async_error(self, comm: Any) -> tuple[int, int]: ...


class CffiBinding:
    """`Binding` over a libnccl opened with cffi's ``dlopen``."""

    def __init__(self, path: str) -> None:
        import cffi

        self.path = path
        self.ffi = ffi = cffi.FFI()
        ffi.cdef(CDEF)
        self.lib = ffi.dlopen(path)  # OSError when missing
        missing = [s for s in SYMBOLS if not _resolves(self.lib, s)]
        if missing:
            raise DistributedError(f"{path} is not a usable libnccl: it lacks {missing}")

    def get_version(self) -> tuple[int, int]:
        out = self.ffi.new("int*")
        return int(self.lib.ncclGetVersion(out)), int(out[0])

    def get_unique_id(self) -> tuple[int, bytes]:
        uid = self.ffi.new("ncclUniqueId*")
        rc = int(self.lib.ncclGetUniqueId(uid))
        return rc, bytes(self.ffi.buffer(uid))

    def comm_init_rank(self, nranks: int, unique_id: bytes, rank: int) -> tuple[int, Any]:
        comm = self.ffi.new("ncclComm_t*")
        uid = self.ffi.new("ncclUniqueId*")
        self.ffi.buffer(uid)[:] = unique_id
        return int(self.lib.ncclCommInitRank(comm, nranks, uid[0], rank)), comm[0]

    def all_reduce(self, sendbuff: int, recvbuff: int, count: int, datatype: int, op: int,
                   comm: Any, stream: int) -> int:
        return int(self.lib.ncclAllReduce(self._ptr(sendbuff), self._ptr(recvbuff), count,
                                          datatype, op, comm, self._ptr(stream)))

    def broadcast(self, sendbuff: int, recvbuff: int, count: int, datatype: int, root: int,
                  comm: Any, stream: int) -> int:
        return int(self.lib.ncclBroadcast(self._ptr(sendbuff), self._ptr(recvbuff), count,
                                          datatype, root, comm, self._ptr(stream)))

    def comm_destroy(self, comm: Any) -> int:
        return int(self.lib.ncclCommDestroy(comm))

    def comm_abort(self, comm: Any) -> int:
        return int(self.lib.ncclCommAbort(comm))

    def get_error_string(self, result: int) -> str:
        return self.ffi.string(self.lib.ncclGetErrorString(result)).decode(errors="replace")

    def comm_get_async_error(self, comm: Any) -> tuple[int, int]:
        out = self.ffi.new("int*")
        return int(self.lib.ncclCommGetAsyncError(comm, out)), int(out[0])

    def _ptr(self, address: int) -> Any:
        return self.ffi.cast("void*", address)


def _resolves(lib: Any, symbol: str) -> bool:
    try:
        getattr(lib, symbol)
    except AttributeError:
        return False
    return True


def library_candidates() -> list[str]:
    """Where libnccl is looked for, in order: $OCANNL_AST_NCCL_LIB, the nvidia-nccl wheel,
    the loader's search path (LD_LIBRARY_PATH, ldconfig)."""
    out: list[str] = []
    if os.environ.get("OCANNL_AST_NCCL_LIB"):
        out.append(os.environ["OCANNL_AST_NCCL_LIB"])
    with contextlib.suppress(ImportError, ValueError):
        spec = importlib.util.find_spec("nvidia.nccl")
        for root in (spec.submodule_search_locations or []) if spec else []:
            out += [str(p) for p in sorted(Path(root, "lib").glob("libnccl.so*"))]
    return [*out, "libnccl.so.2", "libnccl.so"]


@functools.lru_cache(maxsize=1)
def load() -> CffiBinding:
    """The binding over the first libnccl found (`library_candidates`), opened once;
    DistributedError saying where it looked when none opens."""
    tried: list[str] = []
    for path in library_candidates():
        try:
            return CffiBinding(path)
        except OSError as e:
            tried.append(f"{path}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    raise DistributedError("NCCL is not available: " + "; ".join(tried) + f". {INSTALL_HINT}")


_override: list[Binding] = []


def binding() -> Binding:
    """The binding in use: one installed with `using`, else the real library (`load`)."""
    return _override[-1] if _override else load()


@contextlib.contextmanager
def using(b: Binding) -> Iterator[Binding]:
    """Use `b` (e.g. a fake over the CUDA emulator) instead of libnccl inside the block."""
    _override.append(b)
    try:
        yield b
    finally:
        _override.remove(b)


# ---- the communicator of device buffers ----------------------------------------------


class NcclComm:
    """NCCL collectives over the ranks of `world`, on device buffers (addresses), in place,
    queued on a CUDA stream. The unique id travels through the world's host communicator,
    and so does every rank's status after each call: a failure anywhere is a DistributedError
    on every rank (the NCCL communicator aborted first, so no kernel is left waiting)."""

    backend = "nccl"

    def __init__(self, world: World, lib: Binding) -> None:
        self.world, self.lib = world, lib
        self.rank, self.size = world.rank, world.size
        self.comm: Any = None
        rc, version = lib.get_version()
        problem = None if rc == SUCCESS else self._text(rc, "ncclGetVersion")
        if problem is None and version < MIN_VERSION:
            problem = f"NCCL {version} is older than 2.10 (the mean all-reduce needs ncclAvg)"
        uid = b""
        if problem is None and self.rank == 0:
            rc, uid = lib.get_unique_id()
            problem = None if rc == SUCCESS else self._text(rc, "ncclGetUniqueId")
        self._agree("the NCCL set-up", problem)
        uid = world.broadcast(uid, "the broadcast of the NCCL unique id")
        with world.guard("ncclCommInitRank (every rank must join)"):
            rc, comm = lib.comm_init_rank(self.size, uid, self.rank)
        self.comm = comm if rc == SUCCESS else None
        self._agree("ncclCommInitRank", None if rc == SUCCESS
                    else self._text(rc, "ncclCommInitRank"))
        self.version = version

    def allreduce_(self, ptr: int, count: int, dtype: np.dtype[Any], stream: int, *,
                   mean: bool = False) -> None:
        """Sum (or average: ncclAvg, scaled on the device) `count` elements at device
        address `ptr` over the ranks, in place, queued on `stream`."""
        rc = self.lib.all_reduce(ptr, ptr, count, self._dtype(dtype), AVG if mean else SUM,
                                 self.comm, stream)
        self._after(rc, "ncclAllReduce")

    def broadcast_(self, ptr: int, count: int, dtype: np.dtype[Any], stream: int,
                   root: int = 0) -> None:
        """Rank `root`'s `count` elements at `ptr`, on every rank, in place, on `stream`."""
        rc = self.lib.broadcast(ptr, ptr, count, self._dtype(dtype), root, self.comm, stream)
        self._after(rc, "ncclBroadcast")

    def close(self) -> None:
        """Destroy the NCCL communicator (every rank, after its last collective)."""
        if self.comm is not None:
            comm, self.comm = self.comm, None
            self.lib.comm_destroy(comm)

    def _after(self, rc: int, what: str) -> None:
        problem = None if rc == SUCCESS else self._text(rc, what)
        if problem is None:
            rc, err = self.lib.comm_get_async_error(self.comm)
            if rc != SUCCESS:
                problem = self._text(rc, "ncclCommGetAsyncError")
            elif err not in (SUCCESS, IN_PROGRESS):
                problem = self._text(err, f"{what} (asynchronous)")
        self._agree(what, problem)

    def _agree(self, what: str, problem: str | None) -> None:
        statuses = self.world.allgather(problem, f"the status of {what}")
        bad = [(r, p) for r, p in enumerate(statuses) if p is not None]
        if bad:
            if self.comm is not None:
                comm, self.comm = self.comm, None
                self.lib.comm_abort(comm)
            detail = "; ".join(f"rank {r}: {p}" for r, p in bad[:4])
            raise DistributedError(f"{what} failed on rank(s) {[r for r, _ in bad]} of "
                                   f"{self.size}: {detail}", user_span())

    def _text(self, rc: int, call: str) -> str:
        return f"{call} returned {rc} ({self.lib.get_error_string(rc)})"

    def _dtype(self, dtype: np.dtype[Any]) -> int:
        code = DTYPES.get(np.dtype(dtype))
        if code is None:
            raise DistributedError(f"NCCL reduces float32/float64 buffers here, not {dtype}",
                                   user_span())
        return code


# ---- the gradient arena on the device --------------------------------------------------


class DeviceArena:
    """The gradient arena of a CUDA context as one device allocation (each gradient's device
    copy a slice of it), averaged over the ranks by one in-place ncclAllReduce queued on the
    routines' stream between the grad and the update kernels: no host copy."""

    def __init__(self, comm: NcclComm, arena: np.ndarray, views: Sequence[np.ndarray]) -> None:
        from ..backends import cuda_runtime

        self._rt = cuda_runtime
        self.comm, self.arena, self.views = comm, arena, list(views)
        self.ptr = cuda_runtime.device_arena(arena, self.views)

    def reduce_mean(self) -> None:
        rt = self._rt
        for v in self.views:  # a gradient the host wrote since (ctx.set) goes up first
            rt.to_device(v)
        self.comm.allreduce_(self.ptr, self.arena.size, self.arena.dtype, rt.stream_handle(),
                             mean=True)
        for v in self.views:
            rt.device_written(v)


_comms: weakref.WeakKeyDictionary[World, NcclComm] = weakref.WeakKeyDictionary()


def open_device_arena(world: World, arena: np.ndarray, views: Sequence[np.ndarray], *,
                      required: bool) -> tuple[DeviceArena | None, str]:
    """The device arena and "nccl" when libnccl opens and its communicator starts on every
    rank (decided together, so every rank takes the same path); else None and why
    ("host (...)"), or, when `required`, a DistributedError on every rank naming the ranks
    where NCCL failed."""
    lib: Binding | None = None
    try:
        lib = binding()
        problem = None
    except DistributedError as e:
        problem = str(e)
    statuses = world.allgather(problem, "the check that NCCL loads on every rank")
    bad = [(r, p) for r, p in enumerate(statuses) if p is not None]
    if bad or lib is None:
        why = "; ".join(f"rank {r}: {p}" for r, p in bad[:4])
        if required:
            raise DistributedError(f"data_parallel(nccl=True): NCCL is not available on "
                                   f"rank(s) {[r for r, _ in bad]}: {why}", user_span())
        return None, f"host (NCCL unavailable: {why})"
    comm = _comms.get(world)
    if comm is None or comm.lib is not lib or comm.comm is None:
        try:  # a failure is raised on every rank alike: they all fall back together
            comm = _comms[world] = NcclComm(world, lib)
        except DistributedError as e:
            if required:
                raise
            return None, f"host (NCCL set-up failed: {e})"
    return DeviceArena(comm, arena, views), "nccl"
