"""Analyses of the assignments IR (`lowering.assignments`): which buffers a routine reads
before writing them (they must have values when it runs) and which it writes; when each
buffer is live (`lifetimes`, for `Context.memory_report`). Input: an `Asgn`. Output: sets
of buffer ids, `Lifetimes`."""

from __future__ import annotations

import math
from collections.abc import Container
from typing import assert_never

from ..records import record
from . import assignments as A
from .loop_ir import BinOp, Buffer, storage_id


def read_write_sets(asgn: A.Asgn) -> tuple[set[int], set[int]]:
    """Buffers read before any write in the routine, and buffers written. A batch slice's
    view (`loop_ir.View`) counts as its parent; a write through it changes only the slice's
    cells, so it also reads the parent (whose other cells keep their values).

    Example: ``reads, writes = read_write_sets(lowered.asgn)``.
    """
    reads: set[int] = set()
    writes: set[int] = set()
    _walk_rw(asgn, reads, writes)
    return reads, writes


def _read(b: Buffer, reads: set[int], writes: set[int]) -> None:
    sid = storage_id(b)
    if sid not in writes:
        reads.add(sid)


def _write(b: Buffer, reads: set[int], writes: set[int]) -> None:
    if b.view is not None:
        _read(b, reads, writes)
    writes.add(storage_id(b))


def _walk_rw(a: A.Asgn, reads: set[int], writes: set[int]) -> None:
    """`read_write_sets` of `a` added to `reads` and `writes` (module-level, so that no
    recursive closure, a reference cycle, is made per call)."""
    match a:
        case A.Accum(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init):
            for b in rhs:
                _read(b, reads, writes)
            if not init and acc != BinOp.ARG2:
                _read(lhs, reads, writes)
            _write(lhs, reads, writes)
        case A.Block(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init):
            for b in rhs:
                _read(b, reads, writes)
            if not init or acc != BinOp.ADD:
                _read(lhs, reads, writes)  # a gap keeps the target's cells
            _write(lhs, reads, writes)
        case A.RevSides(src=src, targets=targets):
            _read(src, reads, writes)
            for b in targets:
                _read(b, reads, writes)
            for b in targets:
                _write(b, reads, writes)
        case A.Fetch(buffer=b):
            _write(b, reads, writes)
        case A.VecSet(lhs=lhs, rhs=r):
            _read(r, reads, writes)
            _write(lhs, reads, writes)
        case A.CheckStatic() | A.Noop():
            pass
        case A.Seq(items=items):
            for x in items:
                _walk_rw(x, reads, writes)
        case _:
            assert_never(a)


@record
class Lifetimes:
    """When each buffer of a routine is live, by its assignments alone (no allocator's or
    inliner's decision): from the first top-level assignment touching it to the last one,
    or over the whole routine when its first touch reads it (a value from an earlier run).
    `spans`: (buffer id, cells, first, last) in buffer id order; `length`: assignments."""

    spans: tuple[tuple[int, int, int, int], ...]
    length: int

    def peak_cells(self, state: Container[int]) -> int:
        """The most cells of the buffers not in `state` (the intermediates) live during one
        assignment: what any allocator by liveness needs besides the state.

        Example: ``lifetimes(asgn).peak_cells(frozenset({w.id, w_grad.id}))``."""
        delta = [0] * (self.length + 1)
        for b, cells, first, last in self.spans:
            if b not in state:
                delta[first] += cells
                delta[last + 1] -= cells
        peak = live = 0
        for d in delta:
            live += d
            peak = max(peak, live)
        return peak


def lifetimes(asgn: A.Asgn) -> Lifetimes:
    """The lifetimes of the buffers `asgn` touches (see `Lifetimes`).

    Example: ``lifetimes(lowered.asgn).peak_cells(state)``."""
    items = flat(asgn)
    cells: dict[int, int] = {}
    span: dict[int, list[int]] = {}
    written: set[int] = set()
    carried: set[int] = set()
    for k, a in enumerate(items):
        reads, writes = read_write_sets(a)
        for b in _buffers(a):
            b = b.view.parent if b.view is not None else b  # a slice's cells are its parent's
            cells[b.id] = math.prod(b.dims)
            span.setdefault(b.id, [k, k])[1] = k
        carried.update(b for b in reads if b not in written)
        written.update(writes)
    last = max(len(items) - 1, 0)
    return Lifetimes(tuple((b, cells[b], 0 if b in carried else s[0], last if b in carried
                            else s[1]) for b, s in sorted(span.items())), len(items))


def flat(a: A.Asgn) -> list[A.Asgn]:
    """The assignments of `a` in order, nested sequences flattened, no `Noop`.

    Example: ``flat(A.seq(a, A.seq(b, c)))`` is ``[a, b, c]``."""
    match a:
        case A.Seq(items=items):
            return [x for it in items for x in flat(it)]
        case A.Noop():
            return []
        case A.Accum() | A.Block() | A.RevSides() | A.Fetch() | A.CheckStatic() | A.VecSet():
            return [a]
        case _:
            assert_never(a)


def _buffers(a: A.Asgn) -> list[Buffer]:
    """The buffers one (non-sequence) assignment touches."""
    match a:
        case A.Accum(lhs=lhs, rhs=rhs) | A.Block(lhs=lhs, rhs=rhs):
            return [lhs, *rhs]
        case A.RevSides(src=src, targets=targets):
            return [src, *targets]
        case A.Fetch(buffer=b):
            return [b]
        case A.VecSet(lhs=lhs, rhs=rhs):
            return [lhs, rhs]
        case A.CheckStatic() | A.Noop() | A.Seq():
            return []
        case _:
            assert_never(a)
