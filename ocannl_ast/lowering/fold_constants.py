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
        return Const(folds[e.buffer.id]) if isinstance(e, Get) and e.buffer.id in folded \
            else None

    if folded:  # (a unit reading no folded constant is kept as it is)
        rest = [u if folded.isdisjoint(acc.read_ids(u)) else map_stmt(u, expr=value)
                for u in rest]
    more = [f"constant: {b.name} = {folds[b.id]:g}" for b in prog.buffers if b.id in folded]
    return Folded(noted(prog, notes, more, rest, folded), folded)
