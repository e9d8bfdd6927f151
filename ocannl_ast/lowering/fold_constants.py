"""Constant folding (part of OCANNL's virtual memory mode): a constant buffer with one value
in every cell (`oc.number`, a literal, a pooling or convolution window) that the routine
never writes is read as that number instead. Where a folded number makes an exact identity
of IEEE arithmetic -- ``x * 1``, ``1 * x``, ``x + -0.0``, ``-0.0 + x``, ``x - 0.0`` (each
is x, bit for bit, for every x) -- the operation goes too, so a convolution's window of
ones leaves a two-factor product for the contraction kernel.

Stage: the first loop-IR pass after `lower`. Input: a `LoopProgram` and the constants'
values by buffer id. Output: the program over fewer buffers, a note per folded constant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..records import record
from ..vocabulary import BinOp
from .loop_ir import Binary, Const, Expr, Get, LoopProgram
from .nests import body_units, noted
from .walk import Accesses, map_stmt


@record
class Folded:
    """The program after folding, and what was decided."""

    prog: LoopProgram
    folded: frozenset[int]  #: ids of the constant buffers folded into expressions


def fold_constants(prog: LoopProgram, constants: Mapping[int, float]) -> Folded:
    """Read each constant the routine does not write as its value.

    Example: ``fold_constants(prog, {s.id: 2.0}).folded``.
    """
    notes, rest = body_units(prog)
    acc = Accesses()  # (the next passes ask the same of the units this one keeps)
    written = {b for u in rest for b in acc.write_ids(u)}
    folds = {k: v for k, v in constants.items() if k not in written}
    folded = frozenset(b for u in rest for b in acc.read_ids(u) if b in folds)

    def value(e: Expr) -> Expr | None:
        if isinstance(e, Get):
            return Const(folds[e.buffer.id]) if e.buffer.id in folded else None
        return identity_operand(e) if isinstance(e, Binary) else None

    if folded:  # (a unit reading no folded constant is kept as it is)
        rest = [u if folded.isdisjoint(acc.read_ids(u)) else map_stmt(u, expr=value)
                for u in rest]
    more = [f"constant: {b.name} = {folds[b.id]:g}" for b in prog.buffers if b.id in folded]
    return Folded(noted(prog, notes, more, rest, folded), folded)


def _is(e: Expr, value: float) -> bool:
    """`e` is the constant `value`, its sign of zero included."""
    return isinstance(e, Const) and e.value == value and \
        math.copysign(1.0, e.value) == math.copysign(1.0, value)


def identity_operand(e: Binary) -> Expr | None:
    """The operand `e` equals bit for bit when it is an exact identity (x * 1, x + -0.0,
    x - 0.0 and the commuted forms), else None.

    Example: ``identity_operand(Binary(BinOp.MUL, x, Const(1.0)))`` is ``x``."""
    match e.op:
        case BinOp.MUL:
            return e.lhs if _is(e.rhs, 1.0) else e.rhs if _is(e.lhs, 1.0) else None
        case BinOp.ADD:
            return e.lhs if _is(e.rhs, -0.0) else e.rhs if _is(e.lhs, -0.0) else None
        case BinOp.SUB:
            return e.lhs if _is(e.rhs, 0.0) else None
        case _:
            return None
