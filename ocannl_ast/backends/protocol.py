"""The contracts between the tensor layer and a backend: `Backend` (render, compile, and the
hooks a context calls around host reads and writes) and `CompiledRoutine` (what `compile`
returns: arrays bound once, then run with static ints many times).

Stage: interface (no rendering). A new backend implements both and registers a factory by
name (`backends.register_backend`); a dialect of C needs only a `CSyntax` subclass handed
to `CBackend` (see `backends/__init__.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np

from ocannl_ast.errors import RuntimeDataError
from ocannl_ast.lowering.loop_ir import LoopProgram

#: ``(fn, table, statics, failed)``: a routine's leanest call of its bound arrays. Store the
#: static ints into `statics` (``statics[0] = v`` or ``statics[0:n] = values``; a value
#: beyond int64 raises OverflowError), then ``code = fn(table, statics)``; a nonzero code is
#: a failed check: raise ``failed(code)``.
Entry = tuple[Callable[[Any, Any], int], Any, Any, Callable[[int], RuntimeDataError]]


class CompiledRoutine(Protocol):
    """A routine compiled by a backend: one array per buffer of its program (in
    `prog.buffers` order), then its static ints (in `prog.static_args` order).

    Either call it, ``routine(arrays, statics)``: it checks `arrays` and binds them unless
    they are the bound ones, then runs. Or, as a context that owns the arrays does:
    ``share_lock(lock)`` once, ``bind(arrays)`` whenever they change, then
    ``run_bound(statics)`` (or the call `entry()` describes) while holding `lock`.
    Example: ``r = get_backend("c").compile(prog); r.bind(arrays); r.run_bound([])``.
    """

    @property
    def name(self) -> str:
        """The program's name."""
        ...

    @property
    def bound(self) -> tuple[np.ndarray, ...] | None:
        """The arrays bound last (by `bind` or by a call), None before any: a caller that
        bound its own arrays rebinds when this is no longer its tuple."""
        ...

    def __call__(self, arrays: Sequence[np.ndarray], static_args: Sequence[int] = ()) -> None:
        """Bind `arrays` (checked) unless they are bound already, then run; holds the
        routine's lock. BackendError for wrong arrays or statics, RuntimeDataError when a
        check of the routine fails."""
        ...

    def bind(self, arrays: Sequence[np.ndarray]) -> None:
        """Check `arrays` (dtype, size, C order, writeable where written) and make them the
        bound arrays, as the tuple `bound`."""
        ...

    def share_lock(self, lock: Any) -> None:
        """Serialize on `lock` (a re-entrant lock of the caller's) instead of one of its own."""
        ...

    def run_bound(self, static_args: Sequence[int]) -> None:
        """Run on the bound arrays; the caller holds the routine's lock. A static beyond int64
        raises OverflowError before anything runs."""
        ...

    def entry(self) -> Entry:
        """The leanest call of the bound arrays (see `Entry`), for a caller holding the lock."""
        ...


class Backend(Protocol):
    """A backend: renders loop programs and compiles them into `CompiledRoutine`s."""

    @property
    def name(self) -> str:
        """The name it is registered under (``oc.Context(backend=name)``)."""
        ...

    @property
    def fusion_limit(self) -> int:
        """Reductions of at least this many multiply-adds are not epilogue-fused (the
        backend may run them as contraction kernels)."""
        ...

    def render(self, prog: LoopProgram) -> str:
        """The source text `compile` would compile."""
        ...

    def compile(self, prog: LoopProgram) -> CompiledRoutine:
        """Render, compile (or reuse a cached build) and load `prog`."""
        ...

    def ensure_runtime(self) -> None:
        """BackendError unless this backend can run routines in this process."""
        ...

    def to_host(self, arr: np.ndarray) -> None:
        """Before the host reads `arr`, which a routine may have written (on a device)."""
        ...

    def host_written(self, arr: np.ndarray) -> None:
        """After the host wrote the whole of `arr`."""
        ...
