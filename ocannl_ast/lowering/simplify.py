"""Assignments-IR simplification before lowering: a zero fill followed by the first `=+`
into the same buffer (nothing reading it in between) becomes one `=:+` — the fill is
folded into the accumulation's initialize_neutral, so lowering can write cells once.

Input: an `Asgn`. Output: an equivalent `Asgn` (same values in every buffer).
"""

from __future__ import annotations

import dataclasses
from typing import assert_never

from . import assignments as A
from .loop_ir import BinOp, Buffer, storage_id

#: an assignment that is not a sequence
_Leaf = A.Accum | A.Block | A.RevSides | A.Fetch | A.CheckStatic | A.VecSet


def _flatten(code: A.Asgn) -> list[_Leaf]:
    match code:
        case A.Seq(items=items):
            return [x for it in items for x in _flatten(it)]
        case A.Noop():
            return []
        case A.Accum() | A.Block() | A.RevSides() | A.Fetch() | A.CheckStatic() | A.VecSet():
            return [code]
        case _:
            assert_never(code)


def fold_zero_fills(code: A.Asgn) -> A.Asgn:
    """Fold `fill x = 0; ...; x =+ e` into `x =:+ e` where nothing touches x in between. A
    batch slice's view shares its parent's cells (`loop_ir.View`): touching either touches
    both, and a fill folds only into an accumulation through the very same buffer."""
    items = _flatten(code)
    pending: dict[int, tuple[int, Buffer]] = {}  # storage id -> its zero fill's position
    dropped: set[int] = set()

    def touch(*bufs: Buffer) -> None:
        for b in bufs:
            pending.pop(storage_id(b), None)

    for pos, it in enumerate(items):
        match it:
            case A.Fetch(buffer=b, op=A.ConstantFill(value=0.0)):
                pending[storage_id(b)] = (pos, b)
            case A.Fetch(buffer=b):
                touch(b)
            case A.Accum(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init):
                touch(*rhs)
                fill = pending.pop(storage_id(lhs), None)
                if fill is not None and fill[1] == lhs and acc == BinOp.ADD and not init:
                    dropped.add(fill[0])
                    items[pos] = dataclasses.replace(it, initialize_neutral=True)
            case A.VecSet(lhs=lhs, rhs=r):
                touch(lhs, r)
            case A.Block(lhs=lhs, rhs=rhs):
                touch(lhs, *rhs)
            case A.RevSides(src=src, targets=targets):
                touch(src, *targets)
            case A.CheckStatic():
                pass
            case _:
                assert_never(it)
    return A.seq(*(it for pos, it in enumerate(items) if pos not in dropped))
