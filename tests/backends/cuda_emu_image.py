"""The CUDA emulator's module images and how it builds them: `compile_image` wraps a CUDA
translation unit (header, source, digest, 16 trailing zero bytes, as a CUBIN ends with zeros
too), `build_module` compiles it with g++ (``-x c++``) against `SHIM` (``__global__``,
``threadIdx``..., ``atomicCAS``, ``__int_as_float``, the libm declarations) plus one
``extern "C"`` launcher per kernel that runs blocks x threads one after another, forward or
in reverse order. A kernel that calls ``__syncthreads`` runs each block's threads as
coroutines (`RUNTIME`, ucontext): each runs to its next barrier in turn (forward or reverse
order), then all go on; ``__shared__`` variables are static (one block runs at a time), and a
barrier that some threads of a block never reach is an abort (`EmulatorFault` cannot cross
the C frames)."""

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
#define __shared__ static
extern "C" void ocemu_barrier(void);
extern "C" void ocemu_run_block(void (*fn)(void**, unsigned), void** p, unsigned nt, int reverse);
#define __syncthreads() do { ocemu_uint3 ocemu_t_ = threadIdx, ocemu_b_ = blockIdx; \
  ocemu_barrier(); threadIdx = ocemu_t_; blockIdx = ocemu_b_; } while (0)
""" + _math_decls()

#: The coroutine scheduler of kernels with barriers, its own translation unit (it needs the
#: host headers, which the dialect's own typedefs rule out in the kernels' unit).
RUNTIME = r"""#include <ucontext.h>
#include <stdio.h>
#include <stdlib.h>
static ucontext_t ocemu_sched;
static ucontext_t* ocemu_ctx;
static char* ocemu_stacks;
static unsigned char* ocemu_done;
static unsigned ocemu_cap, ocemu_cur;
static void (*ocemu_fn)(void**, unsigned);
static void** ocemu_params;
static const size_t OCEMU_STACK = 1 << 16;
static void ocemu_entry(unsigned t) { ocemu_fn(ocemu_params, t); ocemu_done[t] = 1; }
extern "C" void ocemu_barrier(void) { swapcontext(&ocemu_ctx[ocemu_cur], &ocemu_sched); }
extern "C" void ocemu_run_block(void (*fn)(void**, unsigned), void** p, unsigned nt, int reverse) {
  if (nt > ocemu_cap) {
    free(ocemu_ctx); free(ocemu_stacks); free(ocemu_done);
    ocemu_ctx = (ucontext_t*)calloc(nt, sizeof(ucontext_t));
    ocemu_stacks = (char*)malloc((size_t)nt * OCEMU_STACK);
    ocemu_done = (unsigned char*)malloc(nt);
    if (!ocemu_ctx || !ocemu_stacks || !ocemu_done) { fputs("ocemu: out of memory\n", stderr); abort(); }
    ocemu_cap = nt;
  }
  ocemu_fn = fn; ocemu_params = p;
  for (unsigned t = 0; t < nt; ++t) {
    getcontext(&ocemu_ctx[t]);
    ocemu_ctx[t].uc_stack.ss_sp = ocemu_stacks + (size_t)t * OCEMU_STACK;
    ocemu_ctx[t].uc_stack.ss_size = OCEMU_STACK;
    ocemu_ctx[t].uc_link = &ocemu_sched;
    makecontext(&ocemu_ctx[t], (void (*)(void))ocemu_entry, 1, t);
    ocemu_done[t] = 0;
  }
  for (;;) {  /* a round: each live thread runs to its next barrier or its end */
    for (unsigned f = 0; f < nt; ++f) {
      unsigned t = reverse ? nt - 1 - f : f;
      if (!ocemu_done[t]) { ocemu_cur = t; swapcontext(&ocemu_sched, &ocemu_ctx[t]); }
    }
    unsigned done = 0;
    for (unsigned t = 0; t < nt; ++t) done += ocemu_done[t];
    if (done == nt) return;
    if (done != 0) {
      fprintf(stderr, "ocemu: __syncthreads reached by %u of %u threads of a block\n",
              nt - done, nt);
      abort();
    }
  }
}
"""

KERNEL_RE = re.compile(r'extern "C" __global__ void (\w+)\(([^)]*)\) \{')
GXX_FLAGS = ("-x", "c++", "-std=c++17", "-O1", "-shared", "-fPIC", "-ffp-contract=off",
             "-fno-math-errno", "-Wall", "-Wno-unused-function", "-Wno-unknown-pragmas",
             "-Werror")


@dataclass(frozen=True)
class KernelSig:
    name: str
    types: tuple[str, ...]  #: C++ parameter types, ``__restrict__`` dropped
    barrier: bool = False  #: the kernel calls ``__syncthreads`` (its threads: coroutines)

    def is_pointer(self, i: int) -> bool:
        return self.types[i].endswith("*")


def kernel_sigs(source: str) -> list[KernelSig]:
    sigs = []
    found = list(KERNEL_RE.finditer(source))
    for m, nxt in zip(found, [*found[1:], None][:len(found)], strict=True):
        params = [p.strip() for p in m.group(2).split(",") if p.strip()]
        types = tuple(" ".join(p.replace("__restrict__", "").split()[:-1]).replace(" *", "*")
                      for p in params)
        body = source[m.end():nxt.start() if nxt is not None else len(source)]
        sigs.append(KernelSig(m.group(1), types, "__syncthreads" in body))
    return sigs


def _launcher(sig: KernelSig) -> str:
    args = ", ".join(f"*({t}*)p[{i}]" for i, t in enumerate(sig.types))
    k = sig.name
    if sig.barrier:
        return f"""
static unsigned long long ocemu_block_{k};
static void ocemu_thread_{k}(void** p, unsigned t) {{
  unsigned long long b = ocemu_block_{k};
  unsigned gx = gridDim.x, gy = gridDim.y, bx = blockDim.x, by = blockDim.y;
  blockIdx = {{(unsigned)(b % gx), (unsigned)(b / gx % gy), (unsigned)(b / gx / gy)}};
  threadIdx = {{t % bx, t / bx % by, t / bx / by}};
  {k}({args});
}}
extern "C" void ocemu_run_{k}(void** p, unsigned gx, unsigned gy, unsigned gz,
                               unsigned bx, unsigned by, unsigned bz, int reverse) {{
  gridDim = {{gx, gy, gz}}; blockDim = {{bx, by, bz}};
  unsigned long long nb = (unsigned long long)gx * gy * gz;
  for (unsigned long long f = 0; f < nb; ++f) {{
    ocemu_block_{k} = reverse ? nb - 1 - f : f;
    ocemu_run_block(ocemu_thread_{k}, p, bx * by * bz, reverse);
  }}
}}
"""
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
    key = hashlib.sha256("\0".join([text, RUNTIME, *GXX_FLAGS, _gxx_version()]).encode()
                         ).hexdigest()[:24]
    so = directory / f"emu_{key}.so"
    with _build_lock:
        if not so.exists():
            cpp = directory / f"emu_{key}.{os.getpid()}.cpp"
            cpp.write_text(text)
            rt = directory / f"emu_{key}.{os.getpid()}.rt.cpp"
            rt.write_text(RUNTIME)
            tmp = directory / f"emu_{key}.{os.getpid()}.tmp.so"
            res = subprocess.run(["g++", *GXX_FLAGS, "-o", str(tmp), str(cpp), str(rt), "-lm"],
                                 check=False, capture_output=True, text=True)
            rt.unlink()
            if res.returncode != 0:
                raise EmulatorFault(f"the CUDA source does not compile as C++:\n{res.stderr}")
            tmp.replace(so)
            cpp.replace(so.with_suffix(".cpp"))  # kept beside the build, for reading
    return ctypes.CDLL(str(so)), sigs
