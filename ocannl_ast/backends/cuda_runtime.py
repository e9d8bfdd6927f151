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
import operator
import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ocannl_ast import config
from ocannl_ast.backends.binding import BoundRoutine
from ocannl_ast.backends.cuda_backend import CudaPlan
from ocannl_ast.backends.cuda_graphs import GraphCache
from ocannl_ast.backends.cuda_nvrtc import INSTALL_HINT, compile_parts, compile_ptx, part_count
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


_SIZE = operator.attrgetter("size")
_MEM: dict[int, _DevArray] = {}
#: ids of the arrays whose device copy is older than the host's (`_DevArray.host_newer`)
_DIRTY: set[int] = set()
_mem_lock = threading.RLock()


def _free(key: int, ptr: Any, dev: Device) -> None:
    with _mem_lock:
        _MEM.pop(key, None)
        _DIRTY.discard(key)
    _free_on(dev, ptr)


def _forget(key: int) -> None:
    with _mem_lock:
        _MEM.pop(key, None)
        _DIRTY.discard(key)


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
            _DIRTY.add(id(arr))
            weakref.finalize(arr, _free, id(arr), ptr, dev)
        return d


def _upload(arr: np.ndarray, d: _DevArray, dev: Device | None = None) -> None:
    """Copy the host array to its device buffer once the routine stream's earlier kernels,
    which may still read or write that buffer, are done: the synchronous copy alone waits
    for them only under the legacy default stream, not with per-thread default streams."""
    if d.host_newer:
        if arr.nbytes:
            dev = device() if dev is None else dev
            _check(dev.driver.cuStreamSynchronize(dev.stream), "cuStreamSynchronize")
            _check(dev.driver.cuMemcpyHtoD(d.ptr, arr.ctypes.data, arr.nbytes),
                   "cuMemcpyHtoD")
        d.host_newer = False
        _DIRTY.discard(id(arr))


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
            _DIRTY.add(id(arr))


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
            _DIRTY.add(id(v))
            weakref.finalize(v, _forget, id(v))
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
            _DIRTY.discard(id(arr))


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
    host wrote since and the static arguments (one asynchronous copy), replays the CUDA graph
    of its launches (`cuda_graphs`; or launches every kernel, ``OCANNL_AST_CUDA_GRAPHS=0``)
    and returns without waiting (unless a kernel has an in-kernel check to read back).

    `images` are the compiled programs of `plan.part_sources`, in order (one module each)."""

    def __init__(self, prog: LoopProgram, plan: CudaPlan, images: Sequence[bytes],
                 parts: Sequence[range] | None = None) -> None:
        super().__init__(prog, plan.checks)
        dev = device()
        drv = dev.driver
        self.plan = plan
        parts = [range(len(plan.kernels))] if parts is None else parts
        self._images = [load_image(image) for image in images]
        self._modules = [_check(drv.cuModuleLoadData(im), "cuModuleLoadData")
                         for im in self._images]
        self._functions = [_check(drv.cuModuleGetFunction(module, plan.kernels[k].name.encode()),
                                  "cuModuleGetFunction")
                           for module, part in zip(self._modules, parts) for k in part]
        if len(self._functions) != len(plan.kernels):
            raise BackendError(f"routine {self.name}: {len(images)} images for "
                               f"{len(parts)} parts of {len(plan.kernels)} kernels")
        self._err = _check(drv.cuMemAlloc(4), "cuMemAlloc")
        self._device_checks = any(c not in {h.code for h in plan.host_checks}
                                  for c in plan.checks)
        #: the static arguments, on the host (uploaded each call) and on the device
        self._statics = np.zeros(max(1, self._n_static), dtype=np.int64)
        self._statics_dev = _check(drv.cuMemAlloc(self._statics.nbytes), "cuMemAlloc")
        self._uses_statics = any(k.statics for k in plan.kernels)
        weakref.finalize(self, _free_on, dev, self._err)
        weakref.finalize(self, _free_on, dev, self._statics_dev)
        self._slots = [np.zeros(len(k.buffers) + bool(k.statics) + 1, dtype=np.int64)
                       for k in plan.kernels]
        for k, slots in zip(plan.kernels, self._slots):
            slots[-1] = int(self._err)
            if k.statics:
                slots[-2] = int(self._statics_dev)
        params = [np.array([s.ctypes.data + 8 * i for i in range(s.size)], dtype=np.uint64)
                  for s in self._slots]
        self._params = params
        self._grid = [k.grid() for k in plan.kernels]
        self._launches = [(fn, blocks, threads, p.ctypes.data)
                          for fn, (blocks, threads), p in zip(self._functions, self._grid, params)]
        self._last: tuple[int, ...] = ()
        self._size_list = list(self._sizes)
        self._devs: tuple[tuple[np.ndarray, ...] | None, list[_DevArray], tuple[int, ...],
                          list[_DevArray]] = (None, [], (), [])
        self.graphs = GraphCache(self, drv, dev.stream, config.cuda_graphs())

    def run_bound(self, static_args: Sequence[int]) -> None:
        """Launch on the bound arrays (the caller holds the routine's lock)."""
        if self.bound is None:
            raise BackendError(f"routine {self.name}: no arrays bound (call bind first)")
        self._launch(self.bound, static_args)

    def entry(self) -> Entry:
        """``(fn, table, statics, failed)`` (see `protocol.Entry`): `fn` launches and returns
        0; a failed check raises from it directly."""
        n = self._n_static
        statics = np.zeros(max(1, n), dtype=np.int64)

        def fn(table: tuple[np.ndarray, ...], values: np.ndarray) -> int:
            self._launch(table, values[:n].tolist())
            return 0

        return fn, self.bound, statics, self._failed

    def _bind(self, arrays: Sequence[np.ndarray]) -> None:
        for pos, arr in enumerate(arrays):
            if not self._array_ok(pos, arr):
                raise self._bad_array(pos, arr)
        self.bound = arrays if isinstance(arrays, tuple) else tuple(arrays)

    def _launch(self, arrays: Sequence[np.ndarray], static_args: Sequence[int]) -> None:
        if self.plan.host_checks:
            self._host_checks(static_args)
        dev = device()
        drv, stream = dev.driver, dev.stream
        with _mem_lock:
            ptrs, written = self._device_arrays(arrays, dev)
            if ptrs != self._last:
                self._fill_slots(ptrs)
            if self._device_checks:
                _check(drv.cuMemsetD32Async(self._err, 0, 1, stream), "cuMemsetD32Async")
            if self._uses_statics:
                self._statics[:len(static_args)] = static_args
                # pageable host memory: the driver stages it before returning
                _check(drv.cuMemcpyHtoDAsync(self._statics_dev, self._statics.ctypes.data,
                                             self._statics.nbytes, stream), "cuMemcpyHtoDAsync")
            if not (self.graphs.enabled
                    and self.graphs.launch(ptrs, lambda: self._launch_all(drv, stream))):
                self._launch_all(drv, stream)
            for d in written:
                d.device_newer = True
        if self._device_checks:
            self._read_error(dev)

    def _launch_all(self, drv: Any, stream: Any) -> None:
        for fn, blocks, threads, params in self._launches:
            err = drv.cuLaunchKernel(fn, blocks, 1, 1, threads, 1, 1, 0, stream, params, 0)
            if int(err[0]) != 0:
                _check(err, f"cuLaunchKernel {self.name}")

    def _host_checks(self, static_args: Sequence[int]) -> None:
        for c in self.plan.host_checks:
            index = sum(coeff * int(static_args[pos]) for coeff, pos in c.terms) + c.offset
            if not 0 <= index < c.bound:
                raise self._failed(c.code)

    def _device_arrays(self, arrays: Sequence[np.ndarray], dev: Device
                       ) -> tuple[tuple[int, ...], list[_DevArray]]:
        """The addresses of the device copies of `arrays` (the caller holds `_mem_lock`) and
        the copies the routine writes; each array checked again (an in-place resize) and uploaded
        where the host wrote it since. Kept for the next call on the same tuple of arrays."""
        cached, devs, ptrs, written = self._devs
        if arrays is not cached or list(map(_SIZE, arrays)) != self._size_list:
            for pos, arr in enumerate(arrays):
                if not self._array_ok(pos, arr):
                    raise self._bad_array(pos, arr)
            devs = [_dev_array(arr) for arr in arrays]
            ptrs = tuple([int(d.ptr) for d in devs])
            written = [d for d, w in zip(devs, self._written) if w]
            self._devs = (arrays if isinstance(arrays, tuple) else None, devs, ptrs, written)
        if _DIRTY:
            for arr, d in zip(arrays, devs):
                if d.host_newer:
                    _upload(arr, d, dev)
        return ptrs, written

    def _fill_slots(self, ptrs: tuple[int, ...]) -> None:
        for kernel, slots in zip(self.plan.kernels, self._slots):
            slots[:len(kernel.buffers)] = [ptrs[i] for i in kernel.buffers]
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
    """Compile (or reuse the cached images of) `plan` for the device and load it: a large
    routine as several NVRTC programs at once (`cuda_nvrtc.part_count`)."""
    parts = plan.part_sources(part_count(len(plan.kernels)))
    images = compile_parts(plan.cname, [src for src, _ in parts], device_arch(), compile_ptx)
    return CudaRoutine(prog, plan, images, [kernels for _, kernels in parts])


def synchronize() -> None:
    """Wait for every launch on the stream to finish (timing, before host reads)."""
    dev = device()
    _check(dev.driver.cuStreamSynchronize(dev.stream), "cuStreamSynchronize")
