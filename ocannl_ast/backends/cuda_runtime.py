"""CUDA runtime: the device (driver API through cuda-python), device copies of host arrays,
and routines that launch their kernels on one stream.

Stage: after rendering. Input: a `CudaPlan` and its compiled image. Output: a `CudaRoutine`
(a `protocol.CompiledRoutine`) called like the C backend's routine, with the context's host
arrays: each array has a device copy (allocated on first use); a copy is uploaded only when
the host wrote it since (`host_written`), and downloaded only when the host reads it after a
routine wrote it (`to_host`). A routine call uploads what changed, launches every kernel in
order on the stream and returns without waiting (unless a kernel has an in-kernel check to
read back).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ocannl_ast.backends.binding import BoundRoutine
from ocannl_ast.backends.cuda_backend import CudaPlan
from ocannl_ast.backends.cuda_nvrtc import INSTALL_HINT, compile_ptx
from ocannl_ast.backends.protocol import Entry
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering.loop_ir import LoopProgram


def driver_module() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError:
        try:
            from cuda import cuda as driver  # type: ignore[no-redef]  # cuda-python < 12.6
        except ImportError:
            raise BackendError(f"the CUDA backend needs cuda-python: {INSTALL_HINT}") from None
    return driver


def _check(result: Any, what: str) -> Any:
    """The values of a driver call's result tuple, or a BackendError naming the failure."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        _, name = driver_module().cuGetErrorName(err)
        text = name.decode() if isinstance(name, bytes) else str(err)
        raise BackendError(f"CUDA {what} failed: {text}")
    return values[0] if len(values) == 1 else tuple(values)


@dataclass(frozen=True, slots=True)
class Device:
    """The first GPU's primary context, its compute capability and one stream."""

    driver: Any
    context: Any
    stream: Any
    capability: tuple[int, int]

    def activate(self) -> None:
        _check(self.driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")


_device_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _open_device() -> Device:
    driver = driver_module()
    try:
        err = driver.cuInit(0)
    except (RuntimeError, OSError) as exc:  # the driver library (libcuda) is missing
        raise BackendError(f"the CUDA backend needs an NVIDIA driver and a GPU: {exc}") from None
    err_code = err[0] if isinstance(err, tuple) else err
    if int(err_code) != 0:
        _, name = driver.cuGetErrorName(err_code)
        raise BackendError(f"the CUDA backend needs a GPU: cuInit failed ({name.decode()}; "
                           "no CUDA device or no usable driver)")
    if _check(driver.cuDeviceGetCount(), "cuDeviceGetCount") < 1:
        raise BackendError("the CUDA backend needs a GPU: no CUDA device found")
    dev = _check(driver.cuDeviceGet(0), "cuDeviceGet")
    ctx = _check(driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    _check(driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    attr = driver.CUdevice_attribute
    major = _check(driver.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev), "cuDeviceGetAttribute")
    minor = _check(driver.cuDeviceGetAttribute(
        attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev), "cuDeviceGetAttribute")
    stream = _check(driver.cuStreamCreate(0), "cuStreamCreate")
    return Device(driver, ctx, stream, (int(major), int(minor)))


def device() -> Device:
    """The process's CUDA device, opened once (BackendError when there is none)."""
    with _device_lock:
        dev = _open_device()
    dev.activate()
    return dev


# ---- device copies of host arrays ----------------------------------------------------


@dataclass(slots=True)
class _DevArray:
    ptr: Any  #: CUdeviceptr
    host_newer: bool = True  #: the host wrote it since the last upload
    device_newer: bool = False  #: a routine wrote it since the last download


_MEM: dict[int, _DevArray] = {}
_mem_lock = threading.RLock()


def _free(key: int, ptr: Any, dev: Device) -> None:
    with _mem_lock:
        _MEM.pop(key, None)
    _free_on(dev, ptr)


def _free_on(dev: Device, ptr: Any) -> None:
    """Free `ptr` on the device that allocated it (never opening a device to do so: a
    finalizer may run at any time, e.g. at shutdown or inside a test's patched `os`)."""
    with contextlib.suppress(BackendError, RuntimeError, OSError):  # at shutdown
        dev.activate()
        dev.driver.cuMemFree(ptr)


def _dev_array(arr: np.ndarray) -> _DevArray:
    with _mem_lock:
        d = _MEM.get(id(arr))
        if d is None:
            dev = device()
            ptr = _check(dev.driver.cuMemAlloc(max(arr.nbytes, 1)), "cuMemAlloc")
            d = _MEM[id(arr)] = _DevArray(ptr)
            weakref.finalize(arr, _free, id(arr), ptr, dev)
        return d


def _upload(arr: np.ndarray, d: _DevArray) -> None:
    """Copy the host array to its device buffer once the routine stream's earlier kernels,
    which may still read or write that buffer, are done: the synchronous copy alone waits
    for them only under the legacy default stream, not with per-thread default streams."""
    if d.host_newer:
        if arr.nbytes:
            dev = device()
            _check(dev.driver.cuStreamSynchronize(dev.stream), "cuStreamSynchronize")
            _check(dev.driver.cuMemcpyHtoD(d.ptr, arr.ctypes.data, arr.nbytes),
                   "cuMemcpyHtoD")
        d.host_newer = False


def to_host(arr: np.ndarray) -> None:
    """Bring the host array up to date with its device copy (before the host reads it)."""
    with _mem_lock:
        d = _MEM.get(id(arr))
        if d is not None and d.device_newer:
            dev = device()
            _check(dev.driver.cuStreamSynchronize(dev.stream), "cuStreamSynchronize")
            if arr.nbytes:
                _check(dev.driver.cuMemcpyDtoH(arr.ctypes.data, d.ptr, arr.nbytes),
                       "cuMemcpyDtoH")
            d.device_newer = False


def host_written(arr: np.ndarray) -> None:
    """The host wrote the whole array: upload it before the next routine reads it."""
    with _mem_lock:
        d = _MEM.get(id(arr))
        if d is not None:
            d.host_newer, d.device_newer = True, False


def device_arena(arena: np.ndarray, views: Sequence[np.ndarray]) -> int:
    """Back `views` (slices of the host array `arena`) with ONE device allocation: each
    view's device copy is its slice of the block, so a collective over the block's address
    covers them all. Returns that address; freed with `arena`. Call before any routine used
    the views (BackendError if one already has a device copy)."""
    with _mem_lock:
        dev = device()
        base = int(_check(dev.driver.cuMemAlloc(max(arena.nbytes, 1)), "cuMemAlloc"))
        weakref.finalize(arena, _free_on, dev, dev.driver.CUdeviceptr(base))
        start = arena.ctypes.data
        for v in views:
            offset = v.ctypes.data - start
            if id(v) in _MEM or not 0 <= offset <= offset + v.nbytes <= arena.nbytes:
                raise BackendError("device_arena: each view must lie inside the arena and "
                                   "have no device copy yet")
            _MEM[id(v)] = _DevArray(dev.driver.CUdeviceptr(base + offset))
            weakref.finalize(v, _MEM.pop, id(v), None)
        return base


def to_device(arr: np.ndarray) -> None:
    """Bring the device copy of `arr` up to date (upload what the host wrote since)."""
    with _mem_lock:
        _upload(arr, _dev_array(arr))


def device_written(arr: np.ndarray) -> None:
    """Something other than a routine (a collective) wrote the device copy of `arr`."""
    with _mem_lock:
        d = _MEM.get(id(arr))
        if d is not None:
            d.host_newer, d.device_newer = False, True


def stream_handle() -> int:
    """The address of the stream every routine launches on (for NCCL calls)."""
    return int(device().stream)


# ---- routines ------------------------------------------------------------------------


def load_image(image: bytes) -> bytes:
    """The bytes to hand cuModuleLoadData: a binary image (a CUBIN: ELF, which ends with zero
    bytes of its tables) whole; PTX text NUL-terminated."""
    if image.startswith(b"\x7fELF") or image.endswith(b"\0"):
        return image
    return image + b"\0"


class CudaRoutine(BoundRoutine):
    """A loaded CUDA routine (a `protocol.CompiledRoutine`): ``routine(arrays, static_args)``
    like the C backend's, or `bind` once and `run_bound`. A run uploads the bound arrays the
    host wrote since, launches every kernel and returns without waiting (unless a kernel has
    an in-kernel check to read back)."""

    def __init__(self, prog: LoopProgram, plan: CudaPlan, image: bytes) -> None:
        super().__init__(prog, plan.checks)
        dev = device()
        self.plan = plan
        self._image = load_image(image)
        self._module = _check(dev.driver.cuModuleLoadData(self._image), "cuModuleLoadData")
        self._functions = [_check(dev.driver.cuModuleGetFunction(self._module, k.name.encode()),
                                  "cuModuleGetFunction") for k in plan.kernels]
        self._err = _check(dev.driver.cuMemAlloc(4), "cuMemAlloc")
        self._device_checks = any(c not in {h.code for h in plan.host_checks}
                                  for c in plan.checks)
        self._slots = [np.zeros(len(k.buffers) + len(k.statics) + 1, dtype=np.int64)
                       for k in plan.kernels]
        self._params = [np.array([s.ctypes.data + 8 * i for i in range(s.size)], dtype=np.uint64)
                        for s in self._slots]
        self._last: tuple[int, ...] = ()
        self._statics = np.zeros(max(1, self._n_static), dtype=np.int64)  #: `entry`'s

    def run_bound(self, static_args: Sequence[int]) -> None:
        """Launch on the bound arrays (the caller holds the routine's lock)."""
        if self.bound is None:
            raise BackendError(f"routine {self.name}: no arrays bound (call bind first)")
        self._launch(self.bound, static_args)

    def entry(self) -> Entry:
        """``(fn, table, statics, failed)`` (see `protocol.Entry`): `fn` launches and returns
        0; a failed check raises from it directly."""
        n = self._n_static

        def fn(table: tuple[np.ndarray, ...], statics: np.ndarray) -> int:
            self._launch(table, statics[:n].tolist())
            return 0

        return fn, self.bound, self._statics, self._failed

    def _bind(self, arrays: Sequence[np.ndarray]) -> None:
        for pos, arr in enumerate(arrays):
            if not self._array_ok(pos, arr):
                raise self._bad_array(pos, arr)
        self.bound = arrays if isinstance(arrays, tuple) else tuple(arrays)

    def _launch(self, arrays: Sequence[np.ndarray], static_args: Sequence[int]) -> None:
        self._host_checks(static_args)
        dev = device()
        devs = self._device_arrays(arrays)
        self._fill_slots(devs, static_args)
        drv = dev.driver
        if self._device_checks:
            _check(drv.cuMemsetD32Async(self._err, 0, 1, dev.stream), "cuMemsetD32Async")
        for fn, kernel, params in zip(self._functions, self.plan.kernels, self._params):
            (blocks, threads) = kernel.grid()
            _check(drv.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, dev.stream,
                                      params.ctypes.data, 0), f"cuLaunchKernel {kernel.name}")
        with _mem_lock:
            for d, written in zip(devs, self._written):
                if written:
                    d.device_newer = True
        if self._device_checks:
            self._read_error(dev)

    def _host_checks(self, static_args: Sequence[int]) -> None:
        for c in self.plan.host_checks:
            index = sum(coeff * int(static_args[pos]) for coeff, pos in c.terms) + c.offset
            if not 0 <= index < c.bound:
                raise self._failed(c.code)

    def _device_arrays(self, arrays: Sequence[np.ndarray]) -> list[_DevArray]:
        """The device copies of `arrays`, each checked again (an in-place resize) and
        uploaded where the host wrote it since."""
        devs: list[_DevArray] = []
        for pos, arr in enumerate(arrays):
            if not self._array_ok(pos, arr):
                raise self._bad_array(pos, arr)
            d = _dev_array(arr)
            _upload(arr, d)
            devs.append(d)
        return devs

    def _fill_slots(self, devs: list[_DevArray], static_args: Sequence[int]) -> None:
        ptrs = tuple(int(d.ptr) for d in devs)
        for kernel, slots in zip(self.plan.kernels, self._slots):
            nb = len(kernel.buffers)
            if ptrs != self._last:
                slots[:nb] = [ptrs[i] for i in kernel.buffers]
                slots[-1] = int(self._err)
            slots[nb:-1] = [int(static_args[i]) for i in kernel.statics]
        self._last = ptrs

    def _read_error(self, dev: Device) -> None:
        code = np.zeros(1, dtype=np.int32)
        _check(dev.driver.cuStreamSynchronize(dev.stream), "cuStreamSynchronize")
        _check(dev.driver.cuMemcpyDtoH(code.ctypes.data, self._err, 4), "cuMemcpyDtoH")
        if code[0] != 0:
            raise self._failed(int(code[0]))


def device_arch() -> str:
    """``sm_XY`` of the device (NVRTC compiles SASS for it)."""
    major, minor = device().capability
    return f"sm_{major}{minor}"


def compile_cuda_routine(prog: LoopProgram, plan: CudaPlan) -> CudaRoutine:
    """Compile (or reuse the cached image of) `plan` for the device and load it."""
    image = compile_ptx(plan.cname, plan.source, device_arch())
    return CudaRoutine(prog, plan, image)


def synchronize() -> None:
    """Wait for every launch on the stream to finish (timing, before host reads)."""
    dev = device()
    _check(dev.driver.cuStreamSynchronize(dev.stream), "cuStreamSynchronize")
