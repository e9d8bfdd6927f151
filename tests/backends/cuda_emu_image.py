"""The CUDA emulator's module images and how it builds them: `compile_image` wraps a CUDA
translation unit (header, source, digest, 16 trailing zero bytes, as a CUBIN ends with zeros
too), `build_module` compiles it with g++ (``-x c++``) against `SHIM` (``__global__``,
``threadIdx``..., ``atomicCAS``, ``__int_as_float``, the libm declarations) plus one
``extern "C"`` launcher per kernel that runs blocks x threads one after another, forward or
in reverse order."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import re
import struct
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class EmulatorFault(AssertionError):
    """A kernel did what a GPU would not run deterministically or safely."""


MAGIC = b"OCEMUIMG"
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
          "floor", "ceil", "trunc", "round", "rint", "nearbyint", "expm1", "log1p", "erf", "sinh",
          "cosh", "atan")
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


@functools.cache
def _gxx_version() -> str:
    res = subprocess.run(["g++", "--version"], check=False, capture_output=True, text=True)
    return res.stdout


def build_module(source: str, directory: Path) -> tuple[ctypes.CDLL, list[KernelSig]]:
    """g++-compile `source` with the shim and launchers (cached by digest in `directory`)."""
    sigs = kernel_sigs(source)
    text = SHIM + "\n" + source + "\n" + "".join(_launcher(s) for s in sigs)
    key = hashlib.sha256("\0".join([text, *GXX_FLAGS, _gxx_version()]).encode()
                         ).hexdigest()[:24]
    so = directory / f"emu_{key}.so"
    with _build_lock:
        if not so.exists():
            cpp = directory / f"emu_{key}.{os.getpid()}.cpp"
            cpp.write_text(text)
            tmp = directory / f"emu_{key}.{os.getpid()}.tmp.so"
            res = subprocess.run(["g++", *GXX_FLAGS, "-o", str(tmp), str(cpp), "-lm"],
                                 check=False, capture_output=True, text=True)
            if res.returncode != 0:
                raise EmulatorFault(f"the CUDA source does not compile as C++:\n{res.stderr}")
            tmp.replace(so)
            cpp.replace(so.with_suffix(".cpp"))  # kept beside the build, for reading
    return ctypes.CDLL(str(so)), sigs
