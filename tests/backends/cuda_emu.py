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
import enum
import hashlib
import operator
import os
import re
import struct
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class EmulatorFault(AssertionError):
    """A kernel did what a GPU would not run deterministically or safely."""


class CUresult(enum.IntEnum):
    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_IMAGE = 200
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_ILLEGAL_ADDRESS = 700


class CUdevice_attribute(enum.IntEnum):  # noqa: N801 - cuda-python's name
    CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 1
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
    CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76


class _Handle:
    def __init__(self, value: int = 0) -> None:
        self._value = int(value)

    def __int__(self) -> int:
        return self._value

    def __index__(self) -> int:
        return self._value

    def getPtr(self) -> int:  # noqa: N802 - cuda-python's name
        return self._value

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and int(other) == self._value  # type: ignore

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._value))

    def __repr__(self) -> str:
        return f"<{type(self).__name__} 0x{self._value:x}>"


class CUdevice(_Handle): ...
class CUcontext(_Handle): ...
class CUstream(_Handle): ...
class CUmodule(_Handle): ...
class CUfunction(_Handle): ...
class CUdeviceptr(_Handle): ...


MAGIC = b"OCEMUIMG"
GUARD = 64  #: canary bytes on each side of an allocation
CANARY = 0xA5
TAIL = 16  #: trailing zero bytes of an image


def compile_image(source: str) -> bytes:
    """The emulator's module image of a CUDA translation unit."""
    src = source.encode()
    digest = hashlib.sha256(src).digest()[:16]
    return MAGIC + struct.pack("<Q", len(src)) + digest + src + b"\0" * TAIL


def _image_source(image: Any) -> str | None:
    """The source inside an image given as bytes-like or as an int address; None if bad."""
    if isinstance(image, int):
        head = ctypes.string_at(image, 32)
        if head[:8] != MAGIC:
            return None
        (n,) = struct.unpack("<Q", head[8:16])
        data = ctypes.string_at(image, 32 + n + TAIL)
    else:
        data = bytes(memoryview(image))
        if data[:8] != MAGIC:
            return None
        (n,) = struct.unpack("<Q", data[8:16])
        if len(data) < 32 + n + TAIL:
            return None
    src, tail = data[32:32 + n], data[32 + n:32 + n + TAIL]
    if hashlib.sha256(src).digest()[:16] != data[16:32] or tail != b"\0" * TAIL:
        return None
    return src.decode()


# ---- compiling a module with g++ ------------------------------------------------------

_UNARY = ("exp", "log", "tanh", "sin", "cos", "tan", "sqrt", "exp2", "log2", "log10", "fabs",
          "floor", "ceil", "trunc", "round", "expm1", "log1p", "erf", "sinh", "cosh", "atan")
_BINARY = ("pow", "fmin", "fmax", "fmod", "atan2", "copysign")


def _math_decls() -> str:
    """The libm functions CUDA device code may call, declared (NVRTC needs no header, and a
    host header would clash with the dialect's own ``uint64_t`` typedefs)."""
    out = []
    for t, f in (("float", "f"), ("double", "")):
        out += [f"{t} {b}{f}({t});" for b in _UNARY]
        out += [f"{t} {b}{f}({t}, {t});" for b in _BINARY]
        out += [f"{t} fma{f}({t}, {t}, {t});", f"{t} ldexp{f}({t}, int);"]
    return 'extern "C" {\n' + "\n".join(out) + "\n}\n"


SHIM = r"""// ocannl_ast CUDA emulator shim: the CUDA C++ dialect on the host, one thread at a time
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
struct ocemu_uint3 { unsigned int x, y, z; };
static thread_local __attribute__((unused)) ocemu_uint3 threadIdx, blockIdx, blockDim, gridDim;
static inline float __int_as_float(int i) { float f; __builtin_memcpy(&f, &i, 4); return f; }
static inline int atomicCAS(int* a, int cmp, int val) {
  int old = *a; if (old == cmp) *a = val; return old;
}
""" + _math_decls()

KERNEL_RE = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\) \{')
GXX_FLAGS = ("-x", "c++", "-std=c++17", "-O1", "-shared", "-fPIC", "-ffp-contract=off",
             "-fno-math-errno", "-Wall", "-Wno-unused-function", "-Werror")


@dataclass(frozen=True)
class KernelSig:
    name: str
    types: tuple[str, ...]  #: C++ parameter types, ``__restrict__`` dropped

    def is_pointer(self, i: int) -> bool:
        return self.types[i].endswith("*")


def kernel_sigs(source: str) -> list[KernelSig]:
    sigs = []
    for m in KERNEL_RE.finditer(source):
        params = [p.strip() for p in m.group(2).split(",") if p.strip()]
        types = tuple(" ".join(p.replace("__restrict__", "").split()[:-1]).replace(" *", "*")
                      for p in params)
        sigs.append(KernelSig(m.group(1), types))
    return sigs


def _launcher(sig: KernelSig) -> str:
    args = ", ".join(f"*({t}*)p[{i}]" for i, t in enumerate(sig.types))
    k = sig.name
    return f"""
extern "C" void ocemu_run_{k}(void** p, unsigned gx, unsigned gy, unsigned gz,
                               unsigned bx, unsigned by, unsigned bz, int reverse) {{
  gridDim = {{gx, gy, gz}}; blockDim = {{bx, by, bz}};
  unsigned long long nb = (unsigned long long)gx * gy * gz, nt = (unsigned long long)bx * by * bz;
  for (unsigned long long f = 0; f < nb * nt; ++f) {{
    unsigned long long g = reverse ? nb * nt - 1 - f : f, b = g / nt, t = g % nt;
    blockIdx = {{(unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / gx / gy)}};
    threadIdx = {{(unsigned)(t % bx), (unsigned)(t / bx % by), (unsigned)(t / bx / by)}};
    {k}({args});
  }}
}}
"""


_build_lock = threading.Lock()


def build_module(source: str, directory: Path) -> tuple[ctypes.CDLL, list[KernelSig]]:
    """g++-compile `source` with the shim and launchers (cached by digest in `directory`)."""
    sigs = kernel_sigs(source)
    text = SHIM + "\n" + source + "\n" + "".join(_launcher(s) for s in sigs)
    key = hashlib.sha256((text + " ".join(GXX_FLAGS)).encode()).hexdigest()[:24]
    so = directory / f"emu_{key}.so"
    with _build_lock:
        if not so.exists():
            cpp = directory / f"emu_{key}.cpp"
            cpp.write_text(text)
            tmp = directory / f"emu_{key}.{os.getpid()}.tmp.so"
            res = subprocess.run(["g++", *GXX_FLAGS, "-o", str(tmp), str(cpp), "-lm"],
                                 capture_output=True, text=True)
            if res.returncode != 0:
                raise EmulatorFault(f"the CUDA source does not compile as C++:\n{res.stderr}")
            tmp.replace(so)
    return ctypes.CDLL(str(so)), sigs


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


def _uint(value: Any, what: str, bits: int = 32) -> int:
    """As Cython converts an ``unsigned int`` / ``size_t`` argument."""
    if not isinstance(value, int):
        raise TypeError(f"an integer is required for {what}, got {type(value).__name__}")
    if not 0 <= value < 1 << bits:
        raise OverflowError(f"{what}={value} does not fit an unsigned {bits}-bit int")
    return value


def _address(value: Any, cls: type[_Handle], what: str) -> int:
    if value is None:
        return 0
    if isinstance(value, cls):
        return int(value)
    if isinstance(value, int):
        return _uint(value, what, 64)
    raise TypeError(f"Argument '{what}' is not instance of type (expected {cls.__name__}, "
                    f"int or None), got {type(value).__name__}")


def _host_pointer(value: Any, what: str) -> tuple[int, Any]:
    """An ``Any`` void* argument: an int address or an object with the buffer protocol."""
    if value is None:
        return 0, None
    try:  # cuda-python first converts to an integer address (int, CUdeviceptr...)
        return operator.index(value), None
    except TypeError:
        pass
    try:
        view = memoryview(value)
    except TypeError:
        raise TypeError(f"Argument '{what}' is not an int address or a buffer") from None
    buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view) if view.readonly else \
        (ctypes.c_char * view.nbytes).from_buffer(view)
    return ctypes.addressof(buf), buf


_OK = CUresult.CUDA_SUCCESS


class FakeDriver:
    """The ``cuda.bindings.driver`` calls `cuda_runtime` makes, on one emulated device."""

    CUresult = CUresult
    CUdevice_attribute = CUdevice_attribute
    CUdevice, CUcontext, CUstream = CUdevice, CUcontext, CUstream
    CUmodule, CUfunction, CUdeviceptr = CUmodule, CUfunction, CUdeviceptr

    def __init__(self, directory: Path | None = None, capability: tuple[int, int] = (9, 0),
                 devices: int = 1, race_check: bool = True) -> None:
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
        self._next_handle = 0x1000

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
        key = _address(h, CUstream, "hStream")
        return self.streams.get(key) if key else self.streams.setdefault(0, [])

    # ---- device and context ---------------------------------------------------------

    def cuGetErrorName(self, error: CUresult) -> tuple[CUresult, bytes]:  # noqa: N802
        if not isinstance(error, CUresult):
            raise TypeError("Argument 'error' has incorrect type (expected CUresult)")
        return _OK, error.name.encode()

    def cuInit(self, flags: int) -> tuple[CUresult]:  # noqa: N802
        self._count("cuInit")
        _uint(flags, "Flags")
        if flags != 0:
            return (CUresult.CUDA_ERROR_INVALID_VALUE,)
        self.initialized = True
        return (_OK,)

    def cuDeviceGetCount(self) -> tuple[CUresult, int]:  # noqa: N802
        self._count("cuDeviceGetCount")
        if not self.initialized:
            return CUresult.CUDA_ERROR_NOT_INITIALIZED, 0
        return _OK, self.devices

    def cuDeviceGet(self, ordinal: int) -> tuple[CUresult, CUdevice]:  # noqa: N802
        self._count("cuDeviceGet")
        if not self.initialized:
            return CUresult.CUDA_ERROR_NOT_INITIALIZED, CUdevice()
        if not 0 <= ordinal < self.devices:
            return CUresult.CUDA_ERROR_INVALID_DEVICE, CUdevice()
        return _OK, CUdevice(ordinal)

    def cuDevicePrimaryCtxRetain(self, dev: Any) -> tuple[CUresult, CUcontext]:  # noqa: N802
        self._count("cuDevicePrimaryCtxRetain")
        ordinal = _address(dev, CUdevice, "dev")
        if not 0 <= ordinal < self.devices:
            return CUresult.CUDA_ERROR_INVALID_DEVICE, CUcontext()
        ctx = 0xC0000 + ordinal
        self.contexts.add(ctx)
        return _OK, CUcontext(ctx)

    def cuCtxSetCurrent(self, ctx: Any) -> tuple[CUresult]:  # noqa: N802
        self._count("cuCtxSetCurrent")
        key = _address(ctx, CUcontext, "ctx")
        if key and key not in self.contexts:
            return (CUresult.CUDA_ERROR_INVALID_CONTEXT,)
        self.current.ctx = key or None
        return (_OK,)

    def cuDeviceGetAttribute(self, attrib: CUdevice_attribute, dev: Any) -> tuple[CUresult, int]:  # noqa: N802,E501
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

    def cuStreamCreate(self, flags: int) -> tuple[CUresult, CUstream]:  # noqa: N802
        _uint(flags, "Flags")
        if (err := self._ready("cuStreamCreate")) != _OK:
            return err, CUstream()
        s = self._handle(CUstream)
        self.streams[int(s)] = []
        return _OK, s

    # ---- memory ----------------------------------------------------------------------

    def cuMemAlloc(self, bytesize: int) -> tuple[CUresult, CUdeviceptr]:  # noqa: N802
        _uint(bytesize, "bytesize", 64)
        if (err := self._ready("cuMemAlloc")) != _OK:
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

    def cuMemFree(self, dptr: Any) -> tuple[CUresult]:  # noqa: N802
        base = _address(dptr, CUdeviceptr, "dptr")
        if (err := self._ready("cuMemFree")) != _OK:
            return (err,)
        with self.lock:
            self.synchronize_all()
            if base not in self.allocs:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            self._check_canaries(self.allocs[base], "before cuMemFree")
            del self.allocs[base]
            self.bases.remove(base)
        return (_OK,)

    def cuMemcpyHtoD(self, dstDevice: Any, srcHost: Any, ByteCount: int) -> tuple[CUresult]:  # noqa: N802,N803,E501
        dst = _address(dstDevice, CUdeviceptr, "dstDevice")
        src, _keep = _host_pointer(srcHost, "srcHost")
        n = _uint(ByteCount, "ByteCount", 64)
        if (err := self._ready("cuMemcpyHtoD")) != _OK:
            return (err,)
        with self.lock:
            self.synchronize_all()  # the legacy stream waits for blocking streams
            if self.find(dst, n) is None or not src or self.find(src) is not None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            ctypes.memmove(dst, src, n)
            self.stats.htod_bytes += n
        return (_OK,)

    def cuMemcpyDtoH(self, dstHost: Any, srcDevice: Any, ByteCount: int) -> tuple[CUresult]:  # noqa: N802,N803,E501
        dst, _keep = _host_pointer(dstHost, "dstHost")
        src = _address(srcDevice, CUdeviceptr, "srcDevice")
        n = _uint(ByteCount, "ByteCount", 64)
        if (err := self._ready("cuMemcpyDtoH")) != _OK:
            return (err,)
        with self.lock:
            self.synchronize_all()
            if self.find(src, n) is None or not dst or self.find(dst) is not None:
                return (CUresult.CUDA_ERROR_INVALID_VALUE,)
            ctypes.memmove(dst, src, n)
            self.stats.dtoh_bytes += n
        return (_OK,)

    def cuMemsetD32Async(self, dstDevice: Any, ui: int, N: int, hStream: Any  # noqa: N802,N803
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

    def cuStreamSynchronize(self, hStream: Any) -> tuple[CUresult]:  # noqa: N802,N803
        if (err := self._ready("cuStreamSynchronize")) != _OK:
            return (err,)
        with self.lock:
            key = _address(hStream, CUstream, "hStream")
            if key and key not in self.streams:
                return (CUresult.CUDA_ERROR_INVALID_HANDLE,)
            self.synchronize_all()
        return (_OK,)

    # ---- modules and launches --------------------------------------------------------

    def cuModuleLoadData(self, image: Any) -> tuple[CUresult, CUmodule]:  # noqa: N802
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

    def cuModuleGetFunction(self, hmod: Any, name: bytes) -> tuple[CUresult, CUfunction]:  # noqa: N802,E501
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

    def cuLaunchKernel(self, f: Any, gridDimX: int, gridDimY: int, gridDimZ: int,  # noqa: N802,N803,PLR0913,E501
                       blockDimX: int, blockDimY: int, blockDimZ: int, sharedMemBytes: int,  # noqa: N803
                       hStream: Any, kernelParams: Any, extra: int) -> tuple[CUresult]:  # noqa: N803
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
                    else:
                        self._run(op)

    def _run(self, op: _Launch) -> None:
        sig = op.fn.sig
        touched: list[_Alloc] = []
        for i, p in enumerate(op.params):
            if sig.is_pointer(i):
                addr = int.from_bytes(bytes(p), "little")
                a = self.find(addr)
                if a is None or addr != a.base:
                    raise EmulatorFault(f"kernel {sig.name}: parameter {i} ({sig.types[i]}) "
                                        f"= 0x{addr:x} is not a device allocation")
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


_CTYPES: dict[str, Any] = {
    "int": ctypes.c_int, "unsigned int": ctypes.c_uint, "long long": ctypes.c_longlong,
    "unsigned long long": ctypes.c_ulonglong, "float": ctypes.c_float,
    "double": ctypes.c_double, "uint32_t": ctypes.c_uint32, "int64_t": ctypes.c_int64,
    "uint64_t": ctypes.c_uint64,
}


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
