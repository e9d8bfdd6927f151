"""A parameter's summed-over axis met by a size-1 axis of data: a ShapeError.

OCANNL's broadcasting reads a size-1 axis at position 0 against any size, so `x @ w` with
x of 1 feature and w closed to 3 input features (a `linear` layer already used on 3-feature
data, a `conv2d` kernel of 3 channels applied to a greyscale image) computes
``x[..., 0] * sum_f w[:, f]``: a finite, silently wrong number where PyTorch raises. A
parameter's axis is never meant to be summed against a broadcast cell, so an operation
whose summed-over axis (not in its result) pairs a parameter's axis of size n > 1 with
another operand's size-1 axis is rejected when its projections are derived. Pointwise
broadcasting (`t * {freq}`, a per-example scalar times a parameter vector) stays allowed.

Input: an operation record and its operands' closed rows. Output: ShapeError or nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ShapeError
from ..infer.projections import ShapeDims, reduced_broadcasts
from .node import Init, OpRecord, Tensor


def _is_param(t: Tensor) -> bool:
    return t.base().init is Init.PARAM


def check_param_sums(rec: OpRecord, rows: Sequence[ShapeDims]) -> None:
    """Raise a ShapeError when a size-1 operand axis broadcasts along a parameter's
    summed-over axis of size > 1 in `rec` (operand rows `rows`, from `layout_rows`)."""
    ops = rec.operands
    if len(ops) < 2 or not any(map(_is_param, ops)):
        return
    flat = [[n for row in r for n in row] for r in rows]
    if not any(1 in f for f, o in zip(flat, ops, strict=True) if not _is_param(o)):
        return
    for slot, _axis, other, _k, n in reduced_broadcasts(rec.logic, rec.result.layout_rows(),
                                                       list(rows)):
        x, w = ops[slot - 1], ops[other - 1]
        if _is_param(w) and not _is_param(x):
            raise ShapeError(
                f"'{x.label}' has size 1 on the axis that parameter '{w.base().label}' sums "
                f"over with size {n} (in {rec.name}): the cell would broadcast, every weight "
                "multiplying the same value (PyTorch rejects this). A layer applied to "
                f"inputs of different sizes? Give it inputs of size {n}, or use one layer "
                "per input size", rec.span)
