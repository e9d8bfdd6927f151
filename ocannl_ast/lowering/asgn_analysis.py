"""Analyses of the assignments IR (`lowering.assignments`): which buffers a routine reads
before writing them (they must have values when it runs) and which it writes. Input: an
`Asgn`. Output: sets of buffer ids."""

from __future__ import annotations

from typing import assert_never

from . import assignments as A
from .loop_ir import BinOp


def read_write_sets(asgn: A.Asgn) -> tuple[set[int], set[int]]:
    """Buffers read before any write in the routine, and buffers written.

    Example: ``reads, writes = read_write_sets(lowered.asgn)``.
    """
    reads: set[int] = set()
    writes: set[int] = set()

    def walk(a: A.Asgn) -> None:
        match a:
            case A.Accum(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init):
                for b in rhs:
                    if b.id not in writes:
                        reads.add(b.id)
                if not init and acc != BinOp.ARG2 and lhs.id not in writes:
                    reads.add(lhs.id)
                writes.add(lhs.id)
            case A.Block(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init):
                reads.update(b.id for b in rhs if b.id not in writes)
                if (not init or acc != BinOp.ADD) and lhs.id not in writes:
                    reads.add(lhs.id)  # a gap keeps the target's cells
                writes.add(lhs.id)
            case A.RevSides(src=src, targets=targets):
                if src.id not in writes:
                    reads.add(src.id)
                reads.update(b.id for b in targets if b.id not in writes)
                writes.update(b.id for b in targets)
            case A.Fetch(buffer=b):
                writes.add(b.id)
            case A.VecSet(lhs=lhs, rhs=rhs):
                if rhs.id not in writes:
                    reads.add(rhs.id)
                writes.add(lhs.id)
            case A.CheckStatic() | A.Noop():
                pass
            case A.Seq(items=items):
                for x in items:
                    walk(x)
            case _:
                assert_never(a)

    walk(asgn)
    return reads, writes

