"""Backends: render and compile loop IR programs. `get_backend(name)` returns an object with
`render(prog) -> str` and `compile(prog) -> callable(arrays, static_args)`, plus the hooks a
context calls: `ensure_runtime()` (can this backend run here?), `to_host(arr)` before the
host reads an array a routine may have written, `host_written(arr)` after the host wrote it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..errors import BackendError
from ..lowering.loop_ir import C_KERNEL_MIN_WORK, CONTRACTION_MIN_WORK, LoopProgram


class Backend(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def fusion_limit(self) -> int:
        """Reductions of at least this many multiply-adds are not epilogue-fused (the
        backend may run them as contraction kernels)."""
        ...

    def render(self, prog: LoopProgram) -> str: ...

    def compile(self, prog: LoopProgram) -> Any: ...

    def ensure_runtime(self) -> None: ...

    def to_host(self, arr: np.ndarray) -> None: ...

    def host_written(self, arr: np.ndarray) -> None: ...


@dataclass(frozen=True, slots=True)
class CBackend:
    """gcc + cffi (ABI mode): one shared object per routine, cached on disk."""

    name: str = "c"
    fusion_limit: int = C_KERNEL_MIN_WORK  #: = c_contraction.MIN_WORK

    def render(self, prog: LoopProgram) -> str:
        from .c_backend import render_c

        return render_c(prog)

    def compile(self, prog: LoopProgram) -> Any:
        from .c_backend import compile_c

        return compile_c(prog)

    def ensure_runtime(self) -> None:
        pass  # gcc is checked when the first routine compiles

    def to_host(self, arr: np.ndarray) -> None:
        pass  # routines write the host arrays themselves

    def host_written(self, arr: np.ndarray) -> None:
        pass


@dataclass(frozen=True, slots=True)
class CudaBackend:
    """NVRTC + the CUDA driver API (cuda-python): kernels launched on one stream, arrays
    resident on the device. Rendering needs neither cuda-python nor a GPU."""

    name: str = "cuda"
    fusion_limit: int = CONTRACTION_MIN_WORK  #: no contraction kernels

    def render(self, prog: LoopProgram) -> str:
        from .cuda_backend import render_cuda

        return render_cuda(prog)

    def compile(self, prog: LoopProgram) -> Any:
        from .cuda_backend import plan_cuda
        from .cuda_runtime import compile_cuda_routine

        if os.environ.get("OCANNL_AST_CHECK") == "1":
            from ..lowering.loop_verify import verify_program

            verify_program(prog)
        return compile_cuda_routine(prog, plan_cuda(prog))

    def ensure_runtime(self) -> None:
        """BackendError unless cuda-python, NVRTC, the driver and a GPU are all present."""
        from .cuda_nvrtc import nvrtc_version
        from .cuda_runtime import device

        nvrtc_version()
        device()

    def to_host(self, arr: np.ndarray) -> None:
        from .cuda_runtime import to_host

        to_host(arr)

    def host_written(self, arr: np.ndarray) -> None:
        from .cuda_runtime import host_written

        host_written(arr)


def get_backend(name: str) -> Backend:
    """The backend called `name` ("c"; "cuda" where cuda-python and a GPU exist)."""
    if name == "c":
        return CBackend()
    if name == "cuda":
        return CudaBackend()
    raise BackendError(f"unknown backend {name!r} (known: 'c', 'cuda')")
