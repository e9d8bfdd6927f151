"""Backends: render and compile loop IR programs. `get_backend(name)` returns an object with
`render(prog) -> str` and `compile(prog) -> callable(arrays, static_args)`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..errors import BackendError
from ..lowering.loop_ir import LoopProgram


class Backend(Protocol):
    @property
    def name(self) -> str: ...

    def render(self, prog: LoopProgram) -> str: ...

    def compile(self, prog: LoopProgram) -> Any: ...


@dataclass(frozen=True, slots=True)
class CBackend:
    """gcc + cffi (ABI mode): one shared object per routine, cached on disk."""

    name: str = "c"

    def render(self, prog: LoopProgram) -> str:
        from .c_backend import render_c

        return render_c(prog)

    def compile(self, prog: LoopProgram) -> Any:
        from .c_backend import compile_c

        return compile_c(prog)


def get_backend(name: str) -> Backend:
    """The backend called `name` ("c"; "cuda" where cuda-python and a GPU exist)."""
    if name == "c":
        return CBackend()
    if name == "cuda":
        raise BackendError("the CUDA backend is not available in this build (no cuda-python "
                           "runtime support yet); use backend='c'")
    raise BackendError(f"unknown backend {name!r} (known: 'c', 'cuda')")
