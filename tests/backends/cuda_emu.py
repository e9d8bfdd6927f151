"""A CPU emulator of the CUDA driver API surface `cuda_runtime` uses, for tests without a GPU.

`FakeDriver` stands in for ``cuda.bindings.driver`` (cuda-python 12.x): calls return
``(CUresult, value...)`` tuples, handles are small classes with ``__int__``, and arguments
are converted and checked as cuda-python's Cython wrappers do (``char*`` names are bytes,
``unsigned int`` dimensions are non-negative ints, ``kernelParams`` is None, an int address
of a ``void*[n]`` array, a buffer, or a ``(values, types)`` pair). Device memory is host
memory filled with 0xff (NaN) bytes, between canaries that catch out-of-bounds writes.

A module image is what `compile_image` returns: a header, the CUDA source, a digest and 16
trailing zero bytes (a CUBIN ends with zeros too, so a runtime that trims its image is
caught). Loading it compiles the source with g++ (``-x c++``) against `SHIM` (``__global__``,
``threadIdx``..., ``atomicCAS``, ``__int_as_float``) plus one ``extern "C"`` launcher per
kernel that runs blocks x threads one after another. Launches and ``*Async`` calls queue on
their stream, with parameter values copied at launch (as the driver does); they run at a
synchronizing call (stream synchronize, a synchronous memcpy, free). Each launch runs twice,
threads in forward then reverse order from the same memory: different results mean the
kernel's threads race, which a GPU would make nondeterministic (`EmulatorFault`).
"""

from __future__ import annotations

import bisect
import contextlib
import ctypes
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuda_emu_api import (
    _CTYPES,
    CUcontext,
    CUdevice,
    CUdevice_attribute,
    CUdeviceptr,
    CUfunction,
    CUmodule,
    CUresult,
    CUstream,
    CUstreamCaptureMode,
    _address,
    _Handle,
    _host_pointer,
    _uint,
)
from cuda_emu_graphs import GraphDriver, _Copy
from cuda_emu_image import (
    TAIL,
    EmulatorFault,
    KernelSig,
    _image_source,
    build_module,
    compile_image,
)

__all__ = ["TAIL", "CUresult", "CUstreamCaptureMode", "EmulatorFault", "FakeDriver",
           "compile_image", "installed"]

GUARD = 64  #: canary bytes on each side of an allocation
CANARY = 0xA5

# ---- the driver ----------------------------------------------------------------------


@dataclass
class _Alloc:
    base: int
    size: int
    raw: ctypes.Array  #: GUARD + size + GUARD bytes


@dataclass
class _Function:
    sig: KernelSig
    run: Any
    module: int


@dataclass
class _Launch:
    fn: _Function
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    params: list[ctypes.Array]


@dataclass
class _Memset:
    addr: int
    value: int
    count: int


@dataclass
class Stats:
    launches: int = 0
    threads: int = 0
    htod_bytes: int = 0
    dtoh_bytes: int = 0
    modules: int = 0
    calls: dict[str, int] = field(default_factory=dict)



_OK = CUresult.CUDA_SUCCESS


class FakeDriver(GraphDriver):
    """The ``cuda.bindings.driver`` calls `cuda_runtime` makes, on one emulated device (the
    capture and graph calls: `cuda_emu_graphs`)."""

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUdevice, CUcontext, CUstream = CUdevice, CUcontext, CUstream
    CUmodule, CUfunction, CUdeviceptr = CUmodule, CUfunction, CUdeviceptr

    def __init__(self, directory: Path | None = None, capability: tuple[int, int] = (9, 0),
                 devices: int = 1, race_check: bool = True, graphs: bool = True) -> None:
        self.directory = directory or Path(tempfile.mkdtemp(prefix="ocannl_cuda_emu_"))
        self.capability, self.devices, self.race_check = capability, devices, race_check
        self.initialized = False
        self.lock = threading.RLock()
        self.current = threading.local()
        self.contexts: set[int] = set()
        self.allocs: dict[int, _Alloc] = {}
        self.bases: list[int] = []
        self.streams: dict[int, list[_Launch | _Memset]] = {}
        self.modules: dict[int, dict[str, _Function]] = {}
        self.functions: dict[int, _Function] = {}
        self.stats = Stats()
        #: model CUDA's per-thread default stream: synchronous copies then do not wait for
        #: the work queued on other (blocking) streams, as they do under the legacy stream
        self.per_thread_default_stream = False
        self._next_handle = 0x1000
        self._init_graphs(graphs)

    # ---- helpers --------------------------------------------------------------------

    def _handle(self, cls: type[_Handle]) -> Any:
        self._next_handle += 0x10
        return cls(self._next_handle)

    def _count(self, name: str) -> None:
        self.stats.calls[name] = self.stats.calls.get(name, 0) + 1

    def _ready(self, name: str) -> CUresult:
        """Checks every call after cuInit makes: initialized, a current context."""
        self._count(name)
        if not self.initialized:
            return CUresult.CUDA_ERROR_NOT_INITIALIZED
        if getattr(self.current, "ctx", None) not in self.contexts:
            return CUresult.CUDA_ERROR_INVALID_CONTEXT
        return _OK

    def find(self, addr: int, nbytes: int = 1) -> _Alloc | None:
        """The live allocation holding ``[addr, addr + nbytes)``."""
        i = bisect.bisect_right(self.bases, addr) - 1
        if i < 0:
            return None
        a = self.allocs[self.bases[i]]
        return a if addr + max(nbytes, 1) <= a.base + a.size else None

    def _stream(self, h: Any) -> list[_Launch | _Memset] | None:
        """The queue of stream `h`, or the recording of its capture in progress."""
        return self._queue(_address(h, CUstream, "hStream"))

    # ---- device and context ---------------------------------------------------------

    def cuGetErrorName(self, error: CUresult) -> tuple[CUresult, bytes]:
        if not isinstance(error, CUresult):
            raise TypeError("Argument 'error' has incorrect type (expected CUresult)")
        return _OK, error.name.encode()

    def cuInit(self, flags: int) -> tuple[CUresult]:
        self._count("cuInit")
        _uint(flags, "Flags")
        if flags != 0:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.initialized = True
        return (_OK,)

    def cuDeviceGetCount(self) -> tuple[CUresult, int]:
        self._count("cuDeviceGetCount")
        if not self.initialized:
            return CUresult.CUDA_ERROR_NOT_INITIALIZED, 0
        return _OK, self.devices

    def cuDeviceGet(self, ordinal: int) -> tuple[CUresult, CUdevice]:
        self._count("cuDeviceGet")
        if not self.initialized:
            return CUresult.CUDA_ERROR_NOT_INITIALIZED, CUdevice()
        if not 0 <= ordinal < self.devices:
            return CUresult.CUDA_ERROR_INVALID_DEVICE, CUdevice()
        return _OK, CUdevice(ordinal)

    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[CUresult, CUcontext]:
        self._count("cuDevicePrimaryCtxRetain")
        ordinal = _address(dev, CUdevice, "dev")
        if not 0 <= ordinal < self.devices:
            return CUresult.CUDA_ERROR_INVALID_DEVICE, CUcontext()
        ctx = 0xC0000 + ordinal
        self.contexts.add(ctx)
        return _OK, CUcontext(ctx)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[CUresult]:
        self._count("cuCtxSetCurrent")
        key = _address(ctx, CUcontext, "ctx")
        if key and key not in self.contexts:
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        self.current.ctx = key or None
        return (_OK,)

    def cuDeviceGetAttribute(self, attrib: CUdevice_attribute, dev: Any) -> tuple[CUresult, int]:
        self._count("cuDeviceGetAttribute")
        if not isinstance(attrib, CUdevice_attribute):
            raise TypeError("Argument 'attrib' has incorrect type (expected CUdevice_attribute)")
        if not 0 <= _address(dev, CUdevice, "dev") < self.devices:
            return CUresult.CUDA_ERROR_INVALID_DEVICE, 0
        a = CUdevice_attribute
        value = {a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: self.capability[0],
                 a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: self.capability[1],
                 a.CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: 1024}[attrib]
        return _OK, value

    def cuStreamCreate(self, flags: int) -> tuple[CUresult, CUstream]:
        _uint(flags, "Flags")
        if (err := self._ready("cuStreamCreate")) != _OK:
            return err, CUstream()
        s = self._handle(CUstream)
        self.streams[int(s)] = []
        return _OK, s

    # ---- memory ----------------------------------------------------------------------

    def cuMemAlloc(self, bytesize: int) -> tuple[CUresult, CUdeviceptr]:
        _uint(bytesize, "bytesize", 64)
        if (err := self._ready("cuMemAlloc")) != _OK:
            return err, CUdeviceptr()
        if (err := self._capture_blocks(unsafe=True)) != _OK:
            return err, CUdeviceptr()
        if bytesize == 0:
            return CUresult.CUDA_ERROR_INVALID_VALUE, CUdeviceptr()
        raw = (ctypes.c_char * (bytesize + 2 * GUARD))()
        ctypes.memset(raw, CANARY, GUARD)
        ctypes.memset(ctypes.addressof(raw) + GUARD, 0xFF, bytesize)  # uninitialized: NaN
        ctypes.memset(ctypes.addressof(raw) + GUARD + bytesize, CANARY, GUARD)
        base = ctypes.addressof(raw) + GUARD
        with self.lock:
            self.allocs[base] = _Alloc(base, bytesize, raw)
            bisect.insort(self.bases, base)
        return _OK, CUdeviceptr(base)

    def cuMemFree(self, dptr: Any) -> tuple[CUresult]:
        base = _address(dptr, CUdeviceptr, "dptr")
        if (err := self._ready("cuMemFree")) != _OK:
            return (err,)
        if (err := self._capture_blocks(unsafe=True)) != _OK:
            return (err,)
        with self.lock:
            self.synchronize_all()
            if base not in self.allocs:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            self._check_canaries(self.allocs[base], "before cuMemFree")
            del self.allocs[base]
            self.bases.remove(base)
        return (_OK,)

    def cuMemcpyHtoD(self, dstDevice: Any, srcHost: Any, ByteCount: int) -> tuple[CUresult]:
        dst = _address(dstDevice, CUdeviceptr, "dstDevice")
        src, _keep = _host_pointer(srcHost, "srcHost")
        n = _uint(ByteCount, "ByteCount", 64)
        if (err := self._ready("cuMemcpyHtoD")) != _OK:
            return (err,)
        with self.lock:
            if (err := self._capture_blocks()) != _OK:  # the legacy stream waits for it
                return (err,)
            if not self.per_thread_default_stream:
                self.synchronize_all()  # the legacy stream waits for blocking streams
            if self.find(dst, n) is None or not src or self.find(src) is not None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            ctypes.memmove(dst, src, n)
            self.stats.htod_bytes += n
        return (_OK,)

    def cuMemcpyDtoH(self, dstHost: Any, srcDevice: Any, ByteCount: int) -> tuple[CUresult]:
        dst, _keep = _host_pointer(dstHost, "dstHost")
        src = _address(srcDevice, CUdeviceptr, "srcDevice")
        n = _uint(ByteCount, "ByteCount", 64)
        if (err := self._ready("cuMemcpyDtoH")) != _OK:
            return (err,)
        with self.lock:
            if (err := self._capture_blocks()) != _OK:
                return (err,)
            if not self.per_thread_default_stream:
                self.synchronize_all()
            if self.find(src, n) is None or not dst or self.find(dst) is not None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            ctypes.memmove(dst, src, n)
            self.stats.dtoh_bytes += n
        return (_OK,)

    def cuMemsetD32Async(self, dstDevice: Any, ui: int, N: int, hStream: Any
                         ) -> tuple[CUresult]:
        dst = _address(dstDevice, CUdeviceptr, "dstDevice")
        _uint(ui, "ui")
        n = _uint(N, "N", 64)
        if (err := self._ready("cuMemsetD32Async")) != _OK:
            return (err,)
        with self.lock:
            queue = self._stream(hStream)
            if queue is None:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            if dst % 4 or self.find(dst, 4 * n) is None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            queue.append(_Memset(dst, ui, n))
        return (_OK,)

    def cuStreamSynchronize(self, hStream: Any) -> tuple[CUresult]:
        if (err := self._ready("cuStreamSynchronize")) != _OK:
            return (err,)
        with self.lock:
            key = _address(hStream, CUstream, "hStream")
            if key and key not in self.streams:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            if (err := self._capture_blocks(key or None)) != _OK:
                return (err,)
            self.synchronize_all()
        return (_OK,)

    # ---- modules and launches --------------------------------------------------------

    def cuModuleLoadData(self, image: Any) -> tuple[CUresult, CUmodule]:
        if (err := self._ready("cuModuleLoadData")) != _OK:
            return err, CUmodule()
        source = _image_source(image)
        if source is None:
            return CUresult.CUDA_ERROR_INVALID_IMAGE, CUmodule()
        lib, sigs = build_module(source, self.directory)
        m = self._handle(CUmodule)
        table = {s.name: _Function(s, getattr(lib, f"ocemu_run_{s.name}"), int(m)) for s in sigs}
        self.modules[int(m)] = table
        self.stats.modules += 1
        return _OK, m

    def cuModuleGetFunction(self, hmod: Any, name: bytes) -> tuple[CUresult, CUfunction]:
        if not isinstance(name, bytes):
            raise TypeError(f"expected bytes, {type(name).__name__} found")
        if (err := self._ready("cuModuleGetFunction")) != _OK:
            return err, CUfunction()
        table = self.modules.get(_address(hmod, CUmodule, "hmod"))
        if table is None:
            return CUresult.CUDA_ERROR_INVALID_HANDLE, CUfunction()
        fn = table.get(name.decode())
        if fn is None:
            return CUresult.CUDA_ERROR_NOT_FOUND, CUfunction()
        f = self._handle(CUfunction)
        self.functions[int(f)] = fn
        return _OK, f

    def cuLaunchKernel(self, f: Any, gridDimX: int, gridDimY: int, gridDimZ: int,
                       blockDimX: int, blockDimY: int, blockDimZ: int, sharedMemBytes: int,
                       hStream: Any, kernelParams: Any, extra: int) -> tuple[CUresult]:
        dims = [_uint(d, "dim") for d in (gridDimX, gridDimY, gridDimZ,
                                           blockDimX, blockDimY, blockDimZ, sharedMemBytes)]
        _uint(extra, "extra", 64)
        if (err := self._ready("cuLaunchKernel")) != _OK:
            return (err,)
        fn = self.functions.get(_address(f, CUfunction, "f"))
        if fn is None or fn.module not in self.modules:
            return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
        (gx, gy, gz, bx, by, bz, shared) = dims
        if (min(dims[:6]) < 1 or gx >= 1 << 31 or max(gy, gz) > 65535 or max(bx, by) > 1024
                or bz > 64 or bx * by * bz > 1024 or shared > 48 * 1024 or extra):
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        params = self._copy_params(fn.sig, kernelParams)
        if params is None:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        with self.lock:
            queue = self._stream(hStream)
            if queue is None:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            queue.append(_Launch(fn, (gx, gy, gz), (bx, by, bz), params))
        return (_OK,)

    def _copy_params(self, sig: KernelSig, kernel_params: Any) -> list[ctypes.Array] | None:
        """The parameter values, copied now from where ``kernelParams[i]`` point (the driver
        takes each one's size from the kernel image)."""
        n = len(sig.types)
        if kernel_params is None:
            return [] if n == 0 else None
        if isinstance(kernel_params, tuple):
            raise EmulatorFault("kernelParams as (values, types) is not emulated")
        addr, _keep = _host_pointer(kernel_params, "kernelParams")
        if not addr:
            return None
        ptrs = (ctypes.c_void_p * n).from_address(addr) if n else []
        sizes = [ctypes.sizeof(_CTYPES[t]) if t in _CTYPES else 8 for t in sig.types]
        return [(ctypes.c_char * s).from_buffer_copy(ctypes.string_at(p, s))
                for p, s in zip(ptrs, sizes)]

    # ---- running the queue ---------------------------------------------------------------

    def synchronize_all(self) -> None:
        with self.lock:
            for queue in self.streams.values():
                while queue:
                    op = queue.pop(0)
                    if isinstance(op, _Memset):
                        (ctypes.c_uint32 * op.count).from_address(op.addr)[:] = \
                            [op.value] * op.count
                    elif isinstance(op, _Copy):
                        ctypes.memmove(op.addr, op.data, len(op.data))
                    else:
                        self._run(op)

    def _run(self, op: _Launch) -> None:
        sig = op.fn.sig
        touched: list[_Alloc] = []
        for i, p in enumerate(op.params):
            if sig.is_pointer(i):
                addr = int.from_bytes(bytes(p), "little")
                a = self.find(addr)  # an allocation's base or an address inside it
                if a is None:
                    raise EmulatorFault(f"kernel {sig.name}: parameter {i} ({sig.types[i]}) "
                                        f"= 0x{addr:x} is not a device allocation")
                if all(a is not t for t in touched):
                    touched.append(a)
        argv = (ctypes.c_void_p * max(len(op.params), 1))(
            *[ctypes.addressof(p) for p in op.params])
        before = [ctypes.string_at(a.base, a.size) for a in touched]
        op.fn.run(argv, *op.grid, *op.block, 0)
        self.stats.launches += 1
        self.stats.threads += op.grid[0] * op.grid[1] * op.grid[2] * op.block[0] * op.block[1] \
            * op.block[2]
        for a in touched:
            self._check_canaries(a, f"after kernel {sig.name}")
        if not self.race_check:
            return
        after = [ctypes.string_at(a.base, a.size) for a in touched]
        for a, data in zip(touched, before):
            ctypes.memmove(a.base, data, a.size)
        op.fn.run(argv, *op.grid, *op.block, 1)
        for i, (a, data) in enumerate(zip(touched, after)):
            if ctypes.string_at(a.base, a.size) != data:
                raise EmulatorFault(f"kernel {sig.name}: its threads race on parameter {i} "
                                    "(forward and reverse thread orders give different memory)")

    def _check_canaries(self, a: _Alloc, when: str) -> None:
        raw = bytes(a.raw)
        guard = bytes([CANARY]) * GUARD
        if raw[:GUARD] != guard or raw[GUARD + a.size:] != guard:
            raise EmulatorFault(f"out-of-bounds write around the {a.size}-byte allocation "
                                f"0x{a.base:x} ({when})")


def _nvrtc_available() -> bool:
    from ocannl_ast.backends import cuda_nvrtc
    from ocannl_ast.errors import BackendError

    try:
        cuda_nvrtc.nvrtc_version()
    except BackendError:
        return False
    return True


@contextlib.contextmanager
def installed(driver: FakeDriver) -> Iterator[FakeDriver]:
    """`backend="cuda"` runs on `driver` inside the block: `driver_module()` returns it and
    routines load emulator images (each source still goes through the real NVRTC first where
    it is installed, so it must compile for the device's architecture)."""
    from ocannl_ast.backends import cuda_nvrtc, cuda_runtime

    nvrtc = _nvrtc_available()
    saved = (cuda_runtime.driver_module, cuda_runtime.compile_ptx, cuda_nvrtc.nvrtc_version)
    real_compile = cuda_runtime.compile_ptx

    def compile_image_for(name: str, source: str, arch: str) -> bytes:
        if nvrtc:
            real_compile(name, source, arch)
        return compile_image(source)

    cuda_runtime.driver_module = lambda: driver  # type: ignore[assignment]
    cuda_runtime.compile_ptx = compile_image_for  # type: ignore[assignment]
    if not nvrtc:
        cuda_nvrtc.nvrtc_version = lambda: "emulated"  # type: ignore[assignment]
    cuda_runtime._open_device.cache_clear()
    try:
        yield driver
        driver.synchronize_all()
    finally:
        (cuda_runtime.driver_module, cuda_runtime.compile_ptx,
         cuda_nvrtc.nvrtc_version) = saved  # type: ignore[assignment]
        cuda_runtime._open_device.cache_clear()
