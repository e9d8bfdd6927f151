"""What every backend's compiled routine does alike: the checks of the arrays and static
ints it is called with, binding them, and the error of a failed check.

Stage: after compiling. Input: the routine's `LoopProgram` and its check descriptions.
Output: `BoundRoutine`, the base of `runtime.CRoutine` and `cuda_runtime.CudaRoutine`; a
subclass says how arrays are bound (`_bind`) and how a run goes (`run_bound`).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from ocannl_ast.errors import BackendError, RuntimeDataError, user_span
from ocannl_ast.lowering.loop_ir import Buffer, LoopProgram, Precision, cell_elems, storage
from ocannl_ast.lowering.walk import writes

NUMPY_DTYPE = {Precision.FLOAT32: np.dtype(np.float32), Precision.FLOAT64: np.dtype(np.float64),
               Precision.FLOAT16: np.dtype(np.float16), Precision.BFLOAT16: np.dtype(np.uint16),
               Precision.UINT32: np.dtype(np.uint32), Precision.UINT64: np.dtype(np.uint64),
               Precision.INT32: np.dtype(np.int32)}


class BoundRoutine:
    """A compiled routine's arrays and static ints, checked (the `protocol.CompiledRoutine`
    calls `__call__`, `bind` and `share_lock`); subclasses add `_bind`, `run_bound` and
    `entry`. Example: ``class CRoutine(BoundRoutine): ...``.
    """

    __slots__ = ("_buffers", "_checks", "_dtype", "_dtypes", "_lock", "_n_static", "_sizes", "_written",
                 "bound", "name")

    def __init__(self, prog: LoopProgram, checks: Mapping[int, str]) -> None:
        self.name = prog.name
        self._dtype = NUMPY_DTYPE[prog.precision]
        #: each buffer's array dtype (a buffer of its own precision: `Buffer.precision`)
        self._dtypes = tuple(NUMPY_DTYPE[storage(b, prog.precision)] for b in prog.buffers)
        self._buffers: tuple[Buffer, ...] = prog.buffers
        self._sizes = tuple(cell_elems(b, prog.precision) for b in prog.buffers)
        written = writes(prog.body)
        self._written = tuple(b in written for b in prog.buffers)
        self._n_static = len(prog.static_args)
        self._checks = dict(checks)  #: CheckIndex code -> description
        self._lock: Any = threading.Lock()  # the bound arrays are shared state
        self.bound: tuple[np.ndarray, ...] | None = None  #: the arrays runs use (read-only)

    def __call__(self, arrays: Sequence[np.ndarray], static_args: Sequence[int] = ()) -> None:
        if len(arrays) != len(self._sizes) or len(static_args) != self._n_static:
            self._wrong_counts(arrays, static_args)
        with self._lock:
            if arrays is not self.bound and not self._same_as_bound(arrays):
                self._bind(arrays)
            try:
                self.run_bound(static_args)
            except (TypeError, OverflowError):
                raise self._bad_statics(static_args) from None

    def _wrong_counts(self, arrays: Sequence[np.ndarray], static_args: Sequence[int]) -> NoReturn:
        raise BackendError(
            f"routine {self.name} takes {len(self._sizes)} arrays and {self._n_static} "
            f"static ints, got {len(arrays)} and {len(static_args)}"
        )

    def _bad_statics(self, static_args: Sequence[int]) -> BackendError:
        return BackendError(f"routine {self.name}: static arguments must be 64-bit ints, got "
                            f"{list(static_args)!r}")

    def bind(self, arrays: Sequence[np.ndarray]) -> None:
        """Check `arrays` (never let a routine touch a wrong one) and make them the bound
        arrays."""
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
        """Run on the bound arrays; the caller holds the routine's lock."""
        raise NotImplementedError

    def _bind(self, arrays: Sequence[np.ndarray]) -> None:
        """Check `arrays` and make them `bound` (the caller holds the lock)."""
        raise NotImplementedError

    def _same_as_bound(self, arrays: Sequence[np.ndarray]) -> bool:
        """The bound arrays again (a new sequence of the same objects): no re-checks.

        Our references keep those arrays' memory alive; the size check catches an in-place
        ``resize``, the one way their data could move.
        """
        if self.bound is None:
            return False
        for arr, prev, size, dtype in zip(arrays, self.bound, self._sizes, self._dtypes):
            if arr is not prev or arr.size != size or arr.dtype != dtype:
                return False
        return True

    def _array_ok(self, pos: int, arr: object) -> bool:
        """Whether `arr` fits buffer `pos`: dtype, size, C order, writeable where written."""
        return (isinstance(arr, np.ndarray) and arr.dtype == self._dtypes[pos]
                and arr.size == self._sizes[pos] and arr.flags.c_contiguous
                and (arr.flags.writeable or not self._written[pos]))

    def _bad_array(self, pos: int, arr: object) -> BackendError:
        buf = self._buffers[pos]
        want = f"a C-contiguous {self._dtypes[pos]} array of {self._sizes[pos]} elements {buf.dims}"
        if self._written[pos]:
            want = "a writeable " + want.removeprefix("a ")
        if isinstance(arr, np.ndarray):
            got = f"{arr.dtype} {arr.shape}, c_contiguous={arr.flags.c_contiguous}"
            got += f", writeable={arr.flags.writeable}"
        else:
            got = type(arr).__name__
        return BackendError(f"routine {self.name}: buffer {buf.name!r} needs {want}; got {got}")

    def _failed(self, code: int) -> RuntimeDataError:
        what = self._checks.get(code, "unknown error code")
        # located at the call that ran the routine (a bad static argument, `step(batch=-1)`)
        return RuntimeDataError(f"routine {self.name} failed with code {code}: {what}",
                                user_span())
