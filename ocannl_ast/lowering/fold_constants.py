"""Constant folding (part of OCANNL's virtual memory mode): a scalar constant buffer (one
value in every cell) that the routine never writes is read as that number instead.

Stage: the first loop-IR pass after `lower`. Input: a `LoopProgram` and the constants'
values by buffer id. Output: the program over fewer buffers, a note per folded constant.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..records import record
from .loop_ir import Const, Expr, Get, LoopProgram
from .nests import body_units, noted
from .walk import map_stmt, stmt_gets, writes


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
    written = {b.id for u in rest for b in writes(u)}
    folds = {k: v for k, v in constants.items() if k not in written}
    folded = frozenset(g.buffer.id for u in rest for g in stmt_gets(u) if g.buffer.id in folds)

    def value(e: Expr) -> Expr | None:
        return Const(folds[e.buffer.id]) if isinstance(e, Get) and e.buffer.id in folded \
            else None

    if folded:
        rest = [map_stmt(u, expr=value) for u in rest]
    more = [f"constant: {b.name} = {folds[b.id]:g}" for b in prog.buffers if b.id in folded]
    return Folded(noted(prog, notes, more, rest, folded), folded)
