"""Assignments-IR simplification before lowering: a zero fill followed by the first `=+`
into the same buffer (nothing reading it in between) becomes one `=:+` — the fill is
folded into the accumulation's initialize_neutral, so lowering can write cells once.

Input: an `Asgn`. Output: an equivalent `Asgn` (same values in every buffer).
"""

from __future__ import annotations

import dataclasses
from typing import assert_never

from . import assignments as A
from .loop_ir import BinOp

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
    """Fold `fill x = 0; ...; x =+ e` into `x =:+ e` where nothing touches x in between."""
    items = _flatten(code)
    pending: dict[int, int] = {}  # buffer id -> position of its zero fill
    dropped: set[int] = set()
    for pos, it in enumerate(items):
        match it:
            case A.Fetch(buffer=b, op=A.ConstantFill(value=0.0)):
                pending[b.id] = pos
            case A.Fetch(buffer=b):
                pending.pop(b.id, None)
            case A.Accum(lhs=lhs, rhs=rhs, accum=acc, initialize_neutral=init):
                for r in rhs:
                    pending.pop(r.id, None)
                fill = pending.pop(lhs.id, None)
                if fill is not None and acc == BinOp.ADD and not init:
                    dropped.add(fill)
                    items[pos] = dataclasses.replace(it, initialize_neutral=True)
            case A.VecSet(lhs=lhs, rhs=r):
                pending.pop(lhs.id, None)
                pending.pop(r.id, None)
            case A.Block(lhs=lhs, rhs=rhs):
                for b in (lhs, *rhs):
                    pending.pop(b.id, None)
            case A.RevSides(src=src, targets=targets):
                for b in (src, *targets):
                    pending.pop(b.id, None)
            case A.CheckStatic():
                pass
            case _:
                assert_never(it)
    return A.seq(*(it for pos, it in enumerate(items) if pos not in dropped))
