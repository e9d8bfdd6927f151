"""Runtime of compiled routines: cffi loading (ABI mode), argument validation, calls.

Stage: after compiling. Input: a shared object and its routine's declaration. Output: a
`CompiledRoutine` called with NumPy arrays: each array is checked (dtype, size, C order,
writeable where written, no aliasing of written buffers) before C ever sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, assert_never

import cffi
import numpy as np

from ocannl_ast.errors import BackendError, RuntimeDataError
from ocannl_ast.lowering.loop_ir import (
    Buffer,
    CheckIndex,
    Comment,
    DeclLocal,
    Fill,
    ForLoop,
    LoopProgram,
    Noop,
    Precision,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
    cell_elems,
)

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


class CompiledRoutine:
    """A loaded C routine. Call it with one C-contiguous array per buffer, then static ints.

    Example: ``compile_c(prog)([c, a, b])`` runs ``prog`` on NumPy arrays in place.
    A call with the very arrays of the previous call skips re-validation (the routine keeps
    them referenced until called with other arrays).
    """

    __slots__ = (
        "_buffers",
        "_checks",
        "_ctype",
        "_dtype",
        "_fn",
        "_from_buffer",
        "_last",
        "_last_ptrs",
        "_last_seq",
        "_lib",
        "_n_static",
        "_sizes",
        "_written",
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
        self._written = tuple(b in _written_buffers(prog.body) for b in prog.buffers)
        self._n_static = len(prog.static_args)
        self._checks = dict(library.checks)
        self._last: tuple[np.ndarray, ...] | None = None  # the previous call's arrays
        self._last_ptrs: tuple[Any, ...] = ()  # and their exported pointers
        self._last_seq: object = None

    def __call__(self, arrays: Sequence[np.ndarray], static_args: Sequence[int] = ()) -> None:
        if len(arrays) != len(self._sizes) or len(static_args) != self._n_static:
            raise BackendError(
                f"routine {self.name} takes {len(self._sizes)} arrays and {self._n_static} "
                f"static ints, got {len(arrays)} and {len(static_args)}"
            )
        if arrays is not self._last_seq and not self._same_as_last(arrays):
            self._last_ptrs = self._pointers(arrays)
            self._last = tuple(arrays)
        self._last_seq = arrays  # the same sequence object again: no per-array checks
        code = self._fn(*self._last_ptrs, *static_args)
        if code != 0:
            what = self._checks.get(code, "unknown error code")
            raise RuntimeDataError(f"routine {self.name} failed with code {code}: {what}")

    def _same_as_last(self, arrays: Sequence[np.ndarray]) -> bool:
        """The previous call's arrays again: their pointers can be reused without re-checks.

        Our references and cffi's buffer exports keep those arrays' memory alive; the size
        check catches an in-place ``resize``, the one way their data could move.
        """
        if self._last is None:
            return False
        for arr, prev, size in zip(arrays, self._last, self._sizes):
            if arr is not prev or arr.size != size or arr.dtype != self._dtype:
                return False
        return True

    def _pointers(self, arrays: Sequence[np.ndarray]) -> tuple[Any, ...]:
        """Validate each array (never let C touch a wrong one) and export its memory."""
        ptrs: list[Any] = []
        for arr, size, written in zip(arrays, self._sizes, self._written):
            if not (
                isinstance(arr, np.ndarray) and arr.dtype == self._dtype and arr.size == size
                and arr.flags.c_contiguous and (arr.flags.writeable or not written)
            ):
                raise self._bad_array(len(ptrs), arr)
            ptrs.append(self._from_buffer(self._ctype, arr))
        if len({id(a) for a in arrays}) != len(arrays):
            self._check_aliasing(arrays)
        return tuple(ptrs)

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


def _written_buffers(s: Stmt) -> set[Buffer]:
    match s:
        case Noop() | Comment() | DeclLocal() | SetLocal() | CheckIndex():
            return set()
        case Seq(stmts=stmts):
            return set().union(*(_written_buffers(x) for x in stmts))
        case ForLoop(body=body):
            return _written_buffers(body)
        case SetCell(buffer=buf) | Fill(buffer=buf) | SetFromVec(buffer=buf):
            return {buf}
        case _:
            assert_never(s)
