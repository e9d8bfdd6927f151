"""Backends: render and compile loop IR programs, chosen by name from a registry.

`get_backend(name)` returns a `Backend` (see `protocol`): ``render(prog) -> str``,
``compile(prog) -> CompiledRoutine``, and the hooks a context calls: `ensure_runtime()` (can
this backend run here?), `to_host(arr)` before the host reads an array a routine may have
written, `host_written(arr)` after the host wrote it. A new backend is one registry line:
a dialect of C is a `CSyntax` subclass run by `CBackend`, a dialect of CUDA a `CudaSyntax`
subclass run by `CudaBackend`::

    @dataclass(frozen=True, slots=True)
    class IvdepC(CSyntax):
        inner_loop_pragma: str = "#pragma GCC ivdep"

    register_backend("c_ivdep", lambda: CBackend("c_ivdep", IvdepC()))
    oc.Context("c_ivdep")
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import BackendError
from ..lowering.loop_ir import LoopProgram, Precision
from .c_syntax import C, CSyntax
from .cuda_syntax import CUDA, CudaSyntax
from .protocol import Backend, CompiledRoutine


@dataclass(frozen=True, slots=True)
class CBackend:
    """gcc + cffi (ABI mode) in the dialect `syntax`: one shared object per routine, cached
    on disk (the key covers the dialect)."""

    name: str = "c"
    syntax: CSyntax = field(default=C)  #: how the loop IR is spelled, what the renderer does

    @property
    def fusion_limit(self) -> int:
        return self.syntax.fusion_limit

    def render(self, prog: LoopProgram) -> str:
        from .c_backend import render_c

        return render_c(prog, self.syntax)

    def compile(self, prog: LoopProgram) -> CompiledRoutine:
        from .c_backend import compile_c

        return compile_c(prog, self.syntax)

    def prepare(self, precision: Precision) -> None:
        """Called by a context before it lowers a routine of `precision` (an optional hook):
        starts compiling the contraction kernel's object in the background unless it is
        cached, so that gcc works on it while the routine is lowered."""
        from .c_backend import prebuild_kernel

        prebuild_kernel(self.syntax, precision)

    def ensure_runtime(self) -> None:
        pass  # gcc is checked when the first routine compiles

    def to_host(self, arr: np.ndarray) -> None:
        pass  # routines write the host arrays themselves

    def host_written(self, arr: np.ndarray) -> None:
        pass


@dataclass(frozen=True, slots=True)
class CudaBackend:
    """NVRTC + the CUDA driver API (cuda-python) in the dialect `syntax`: kernels launched on
    one stream, arrays resident on the device. Rendering needs neither cuda-python nor a GPU.
    """

    name: str = "cuda"
    syntax: CudaSyntax = field(default=CUDA)

    @property
    def fusion_limit(self) -> int:
        return self.syntax.fusion_limit

    def render(self, prog: LoopProgram) -> str:
        from .cuda_backend import render_cuda

        return render_cuda(prog, self.syntax)

    def compile(self, prog: LoopProgram) -> CompiledRoutine:
        from .cuda_backend import plan_cuda
        from .cuda_runtime import compile_cuda_routine

        return compile_cuda_routine(prog, plan_cuda(prog, self.syntax))

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


#: name -> factory of the backend of that name, in registration order.
BACKENDS: dict[str, Callable[[], Backend]] = {
    "c": CBackend,
    "cuda": CudaBackend,
}


def register_backend(name: str, factory: Callable[[], Backend], *,
                     replace: bool = False) -> None:
    """Make `get_backend(name)` (hence ``oc.Context(name)``) return ``factory()``.

    BackendError when `name` is taken, unless `replace`. Example:
    ``register_backend("c_O3", lambda: CBackend("c_O3", MyDialect()))``.
    """
    if not isinstance(name, str) or not name:
        raise BackendError(f"a backend name is a non-empty str, got {name!r}")
    if name in BACKENDS and not replace:
        raise BackendError(f"backend {name!r} is already registered (pass replace=True)")
    BACKENDS[name] = factory


def unregister_backend(name: str) -> None:
    """Remove a registered backend (tests; the built-in ones stay removable too)."""
    BACKENDS.pop(name, None)


def backend_names() -> tuple[str, ...]:
    """The registered names, in registration order."""
    return tuple(BACKENDS)


def get_backend(name: str) -> Backend:
    """The backend registered as `name` ("c"; "cuda" where cuda-python and a GPU exist)."""
    factory = BACKENDS.get(name)
    if factory is None:
        known = ", ".join(repr(n) for n in BACKENDS)
        raise BackendError(f"unknown backend {name!r} (known: {known})")
    return factory()


__all__ = ["BACKENDS", "Backend", "CBackend", "CompiledRoutine", "CudaBackend",
           "backend_names", "get_backend", "register_backend", "unregister_backend"]
