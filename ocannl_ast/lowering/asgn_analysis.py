"""Analyses of the assignments IR (`lowering.assignments`): which buffers a routine reads
before writing them (they must have values when it runs) and which it writes. Input: an
`Asgn`. Output: sets of buffer ids."""

from __future__ import annotations

from typing import assert_never

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

    def read(b: Buffer) -> None:
        if storage_id(b) not in writes:
            reads.add(storage_id(b))

    def write(b: Buffer) -> None:
        if b.view is not None:
            read(b)
        writes.add(storage_id(b))

    def walk(a: A.Asgn) -> None:
        match a:
            case A.Accum(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init):
                for b in rhs:
                    read(b)
                if not init and acc != BinOp.ARG2:
                    read(lhs)
                write(lhs)
            case A.Block(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init):
                for b in rhs:
                    read(b)
                if not init or acc != BinOp.ADD:
                    read(lhs)  # a gap keeps the target's cells
                write(lhs)
            case A.RevSides(src=src, targets=targets):
                read(src)
                for b in targets:
                    read(b)
                for b in targets:
                    write(b)
            case A.Fetch(buffer=b):
                write(b)
            case A.VecSet(lhs=lhs, rhs=rhs):
                read(rhs)
                write(lhs)
            case A.CheckStatic() | A.Noop():
                pass
            case A.Seq(items=items):
                for x in items:
                    walk(x)
            case _:
                assert_never(a)

    walk(asgn)
    return reads, writes
