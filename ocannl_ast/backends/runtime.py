"""Runtime of compiled routines: cffi loading (ABI mode), argument validation, calls.

Stage: after compiling. Input: a shared object and its routine's declaration. Output: a
`CRoutine` (a `protocol.CompiledRoutine`) called with NumPy arrays: each array is checked
(dtype, size, C order, writeable where written, no aliasing of written buffers) before C
ever sees it.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi
import numpy as np

from ocannl_ast.backends.protocol import Entry
from ocannl_ast.errors import BackendError, RuntimeDataError
from ocannl_ast.lowering.loop_ir import (
    LoopProgram,
    Precision,
    cell_elems,
)
from ocannl_ast.lowering.walk import writes

NUMPY_DTYPE = {Precision.FLOAT32: np.dtype(np.float32), Precision.FLOAT64: np.dtype(np.float64)}
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


def load(so_path: Path, cdef: str) -> tuple[cffi.FFI, Any]:
    """dlopen `so_path` once per process with the declaration `cdef`.

    Raises OSError when it is not a loadable library (the caller rebuilds it).
    """
    key = str(so_path)
    if key not in _LOADED:
        ffi = cffi.FFI()
        ffi.cdef(cdef)
        _LOADED[key] = (ffi, ffi.dlopen(key))
    return _LOADED[key]


class CRoutine:
    """A loaded C routine (a `protocol.CompiledRoutine`). Call it with one C-contiguous
    array per buffer, then static ints.

    Example: ``compile_c(prog)([c, a, b])`` runs ``prog`` on NumPy arrays in place.
    The C entry point takes one table of buffer pointers and one array of static ints. The
    table is built (each array checked) by `bind` and kept while the arrays stay the same:
    a call with the bound arrays only stores the static ints and calls C. A caller that
    owns the arrays (a context's `Routine`) binds once, then calls `run_bound`.
    """

    __slots__ = (
        "_buffers",
        "_checks",
        "_ctype",
        "_dtype",
        "_exports",
        "_fn",
        "_from_buffer",
        "_lib",
        "_lock",
        "_n_static",
        "_sizes",
        "_statics",
        "_table",
        "_written",
        "bound",
        "library_path",
        "name",
        "source_path",
    )

    def __init__(self, prog: LoopProgram, library: LoadedLibrary) -> None:
        ffi, lib = library.ffi, library.lib
        self.name = prog.name
        self.source_path = library.source_path  #: the generated C file
        self.library_path = library.so_path  #: the shared object it was compiled to
        self._lib = lib  # keeps the library mapped while the routine lives
        self._fn = getattr(lib, library.cname)
        self._from_buffer = ffi.from_buffer
        self._ctype = f"{library.c_type}[]"
        self._dtype = NUMPY_DTYPE[prog.precision]
        self._buffers = prog.buffers
        self._sizes = tuple(cell_elems(b, prog.precision) for b in prog.buffers)
        written = writes(prog.body)
        self._written = tuple(b in written for b in prog.buffers)
        self._n_static = len(prog.static_args)
        self._checks = dict(library.checks)
        self._table = ffi.new(f"{library.c_type} *[]", max(1, len(prog.buffers)))
        self._statics = ffi.new("int64_t[]", max(1, self._n_static))
        self._exports: tuple[Any, ...] = ()  # keep the table's memory exported (alive)
        self.bound: tuple[np.ndarray, ...] | None = None  #: the arrays of the table (read-only)
        self._lock = threading.Lock()  # the table and the statics are shared state

    def __call__(self, arrays: Sequence[np.ndarray], static_args: Sequence[int] = ()) -> None:
        if len(arrays) != len(self._sizes) or len(static_args) != self._n_static:
            raise BackendError(
                f"routine {self.name} takes {len(self._sizes)} arrays and {self._n_static} "
                f"static ints, got {len(arrays)} and {len(static_args)}"
            )
        with self._lock:
            if arrays is not self.bound and not self._same_as_bound(arrays):
                self._bind(arrays)
            self._run(static_args)

    def bind(self, arrays: Sequence[np.ndarray]) -> None:
        """Check `arrays` (never let C touch a wrong one) and make them the bound arrays."""
        if len(arrays) != len(self._sizes):
            raise BackendError(f"routine {self.name} takes {len(self._sizes)} arrays, got "
                               f"{len(arrays)}")
        with self._lock:
            self._bind(arrays)

    def share_lock(self, lock: Any) -> None:
        """Serialize on `lock` (re-entrant; a context's) instead of a lock of our own, so a
        caller holding it can `run_bound` while direct calls still wait for it."""
        self._lock = lock

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

    def _run(self, static_args: Sequence[int]) -> None:
        try:
            self.run_bound(static_args)
        except (TypeError, OverflowError):
            raise BackendError(f"routine {self.name}: static arguments must be 64-bit "
                               f"ints, got {list(static_args)!r}") from None

    def _failed(self, code: int) -> RuntimeDataError:
        what = self._checks.get(code, "unknown error code")
        return RuntimeDataError(f"routine {self.name} failed with code {code}: {what}")

    def _same_as_bound(self, arrays: Sequence[np.ndarray]) -> bool:
        """The bound arrays again (a new sequence of the same objects): no re-checks.

        Our references and cffi's buffer exports keep those arrays' memory alive; the size
        check catches an in-place ``resize``, the one way their data could move.
        """
        if self.bound is None:
            return False
        for arr, prev, size in zip(arrays, self.bound, self._sizes):
            if arr is not prev or arr.size != size or arr.dtype != self._dtype:
                return False
        return True

    def _bind(self, arrays: Sequence[np.ndarray]) -> None:
        exports: list[Any] = []
        for arr, size, written in zip(arrays, self._sizes, self._written):
            if not (
                isinstance(arr, np.ndarray) and arr.dtype == self._dtype and arr.size == size
                and arr.flags.c_contiguous and (arr.flags.writeable or not written)
            ):
                raise self._bad_array(len(exports), arr)
            exports.append(self._from_buffer(self._ctype, arr))
        if len({id(a) for a in arrays}) != len(arrays):
            self._check_aliasing(arrays)
        for pos, ptr in enumerate(exports):
            self._table[pos] = ptr
        self._exports = tuple(exports)
        self.bound = arrays if isinstance(arrays, tuple) else tuple(arrays)

    def _check_aliasing(self, arrays: Sequence[np.ndarray]) -> None:
        """Buffers are `restrict`: an array written through one may not be passed twice."""
        ids = [id(a) for a in arrays]
        for pos, written in enumerate(self._written):
            if written and ids.count(ids[pos]) > 1:
                name = self._buffers[pos].name
                raise BackendError(f"routine {self.name}: written buffer {name!r} aliases another")

    def _bad_array(self, pos: int, arr: object) -> BackendError:
        buf = self._buffers[pos]
        want = f"a C-contiguous {self._dtype} array of {self._sizes[pos]} elements {buf.dims}"
        if self._written[pos]:
            want = "a writeable " + want.removeprefix("a ")
        if isinstance(arr, np.ndarray):
            got = f"{arr.dtype} {arr.shape}, c_contiguous={arr.flags.c_contiguous}"
            got += f", writeable={arr.flags.writeable}"
        else:
            got = type(arr).__name__
        return BackendError(f"routine {self.name}: buffer {buf.name!r} needs {want}; got {got}")
