"""Runtime of compiled routines: cffi loading (ABI mode), argument validation, calls.

Stage: after compiling. Input: a shared object and its routine's declaration. Output: a
`CRoutine` (a `protocol.CompiledRoutine`) called with NumPy arrays: each array is checked
(dtype, size, C order, writeable where written, no aliasing of written buffers) before C
ever sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi
import numpy as np

from ocannl_ast.backends.binding import NUMPY_DTYPE, BoundRoutine
from ocannl_ast.backends.protocol import Entry
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering.loop_ir import LoopProgram

__all__ = ["NUMPY_DTYPE", "CRoutine", "LoadedLibrary", "declare", "is_loaded", "load"]
_LOADED: dict[str, tuple[cffi.FFI, Any]] = {}


@dataclass(frozen=True, slots=True)
class LoadedLibrary:
    """A shared object mapped into this process, and what calling its routine needs."""

    ffi: cffi.FFI
    lib: Any  #: the cffi library object (keeps the mapping alive)
    cname: str  #: the routine's C name
    c_type: str  #: the C element type of its buffers ("float", "double")
    checks: Mapping[int, str]  #: CheckIndex code -> description
    source_path: Path
    so_path: Path


def is_loaded(so_path: Path) -> bool:
    """Whether `so_path` is already mapped in this process (then it is not re-verified)."""
    return str(so_path) in _LOADED


def declare(cdef: str) -> cffi.FFI:
    """A cffi FFI holding the declaration `cdef` (the first in a process costs ~50 ms of
    parser setup: `c_backend.compile_c` does it while gcc runs)."""
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    return ffi


def load(so_path: Path, cdef: str, ffi: cffi.FFI | None = None) -> tuple[cffi.FFI, Any]:
    """dlopen `so_path` once per process with the declaration `cdef` (already parsed in
    `ffi`, from `declare(cdef)`, when given).

    Raises OSError when it is not a loadable library (the caller rebuilds it).
    """
    key = str(so_path)
    if key not in _LOADED:
        ffi = declare(cdef) if ffi is None else ffi
        _LOADED[key] = (ffi, ffi.dlopen(key))
    return _LOADED[key]


class CRoutine(BoundRoutine):
    """A loaded C routine (a `protocol.CompiledRoutine`). Call it with one C-contiguous
    array per buffer, then static ints.

    Example: ``compile_c(prog)([c, a, b])`` runs ``prog`` on NumPy arrays in place.
    The C entry point takes one table of buffer pointers and one array of static ints. The
    table is built (each array checked) by `bind` and kept while the arrays stay the same:
    a call with the bound arrays only stores the static ints and calls C. A caller that
    owns the arrays (a context's `Routine`) binds once, then calls `run_bound`.
    """

    __slots__ = ("_cast", "_ctype", "_exports", "_fn", "_fn_v", "_from_buffer", "_lib",
                 "_statics", "_table", "library_path", "source_path")

    def __init__(self, prog: LoopProgram, library: LoadedLibrary) -> None:
        super().__init__(prog, library.checks)
        ffi, lib = library.ffi, library.lib
        self.source_path = library.source_path  #: the generated C file
        self.library_path = library.so_path  #: the shared object it was compiled to
        self._lib = lib  # keeps the library mapped while the routine lives
        self._fn = getattr(lib, library.cname)
        # a routine of one static int has an entry taking it by value (`CSyntax.value_entry`)
        self._fn_v = getattr(lib, library.cname + "_v") if self._n_static == 1 else None
        self._from_buffer = ffi.from_buffer
        self._cast = ffi.cast
        self._ctype = f"{library.c_type}[]"
        self._table = ffi.new(f"{library.c_type} *[]", max(1, len(prog.buffers)))
        self._statics = ffi.new("int64_t[]", max(1, self._n_static))
        self._exports: tuple[Any, ...] = ()  # keep the table's memory exported (alive)

    def __call__(self, arrays: Sequence[np.ndarray], static_args: Sequence[int] = ()) -> None:
        # `BoundRoutine.__call__` with `run_bound` inline: the hot path of a caller that
        # runs the compiled code directly, a few hundred nanoseconds
        n = self._n_static
        if len(arrays) != len(self._sizes) or len(static_args) != n:
            self._wrong_counts(arrays, static_args)
        acquire, release = self._lock.acquire, self._lock.release
        acquire()
        try:
            if arrays is not self.bound and not self._same_as_bound(arrays):
                self._bind(arrays)
            fn_v = self._fn_v
            try:
                if fn_v is not None:  # one static, passed by value (cffi checks it first)
                    code = fn_v(self._table, static_args[0])
                else:
                    st = self._statics
                    if n:
                        st[0:n] = static_args
                    code = self._fn(self._table, st)
            except (TypeError, OverflowError):
                raise self._bad_statics(static_args) from None
        finally:
            release()
        if code != 0:
            raise self._failed(code)

    def run_bound(self, static_args: Sequence[int]) -> None:
        """Call C on the bound arrays with `static_args` (Python ints). The caller holds the
        routine's lock (see `share_lock`) and has bound the arrays. A static beyond int64
        raises OverflowError before C runs."""
        if self.bound is None:  # an unfilled table: C would read null pointers
            raise BackendError(f"routine {self.name}: no arrays bound (call bind first)")
        n = self._n_static
        if n == 1:
            self._statics[0] = static_args[0]
        elif n:
            self._statics[0:n] = static_args
        code = self._fn(self._table, self._statics)
        if code != 0:
            raise self._failed(code)

    def entry(self) -> Entry:
        """``(fn, table, statics, failed)`` for a caller's own leanest call of the bound
        arrays (`bound`), holding the routine's lock: store the static ints into `statics`,
        ``code = fn(table, statics)``, and raise ``failed(code)`` when code is nonzero."""
        return self._fn, self._table, self._statics, self._failed

    def value_entry(self) -> tuple[Any, Any, Any] | None:
        """``(fn, table, failed)`` for a routine of one static int: ``code = fn(table, s)``
        (OverflowError for an `s` beyond int64, before C runs); None for other routines."""
        return None if self._fn_v is None else (self._fn_v, self._table, self._failed)

    def _bind(self, arrays: Sequence[np.ndarray]) -> None:
        exports: list[Any] = []
        for pos, arr in enumerate(arrays):
            if not self._array_ok(pos, arr):
                raise self._bad_array(pos, arr)
            exports.append(self._from_buffer(self._ctype, arr) if arr.dtype == self._dtype
                           else self._from_buffer("char[]", arr))  # its own precision
        if len({id(a) for a in arrays}) != len(arrays):
            self._check_aliasing(arrays)
        for pos, ptr in enumerate(exports):
            self._table[pos] = ptr if arrays[pos].dtype == self._dtype else \
                self._cast(self._ctype[:-2] + "*", ptr)
        self._exports = tuple(exports)
        self.bound = arrays if isinstance(arrays, tuple) else tuple(arrays)

    def _check_aliasing(self, arrays: Sequence[np.ndarray]) -> None:
        """Buffers are `restrict`: an array written through one may not be passed twice."""
        ids = [id(a) for a in arrays]
        for pos, written in enumerate(self._written):
            if written and ids.count(ids[pos]) > 1:
                name = self._buffers[pos].name
                raise BackendError(f"routine {self.name}: written buffer {name!r} aliases another")
