"""Stacking and block literals (seed 004): `stack` joins equally shaped tensors along a new
axis leading one row (its own shape logic, `infer.relations.Stack`), and shares the
concatenation's projections: the new axis is the regular coupled factor of n size-1
components, forward a Block, gradient a Rev_sides. `block_literal` reads a nested display
whose leaves are tensors: list = output axis, tuple = input axis, `batch([...])` = batch.

Input: tensors (numbers in a block literal are rank-0 constants). Output: the stacked Tensor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ArgumentError, ShapeError, user_span
from ...infer.relations import Stack
from ...infer.terms import Kind
from .. import validate
from ..leaves import literal, ndarray
from ..node import BatchList, NodeRef, Tensor
from .base import apply
from .contraction import concat_asns

_KINDS = {"output": Kind.OUTPUT, "input": Kind.INPUT, "batch": Kind.BATCH}


def stack(tensors: Sequence[Any], axis_kind: str = "output") -> Tensor:
    """Stack equally shaped tensors along a new axis of size ``len(tensors)`` that leads
    the `axis_kind` row ("output", "input" or "batch"); the k-th tensor fills position k.
    Differentiable in every operand. Shapes must be equal (no broadcasting): a mismatch
    is a ShapeError at the call.

    Example: stacking three tensors of output shape ``2`` along "output" gives output
    shape ``3, 2``, as ``np.stack``: ``oc.stack([x, y, z])``.
    """
    kind = _kind(axis_kind)
    if isinstance(tensors, Tensor | NodeRef | str) or not isinstance(tensors, Sequence):
        validate.fail(ArgumentError, "stack takes a list or tuple of tensors, got "
                      f"{validate.describe(tensors)}")
    if not tensors:
        validate.fail(ShapeError, "stack of no tensors: the new axis would have size 0")
    if any(isinstance(t, NodeRef) for t in tensors):
        validate.fail(ArgumentError, "stack is built in @op code or plain Python, not from "
                      "@cd node references")
    op_asn, grad_asn = concat_asns(len(tensors))
    return apply("stack", Stack(kind, len(tensors)), op_asn, grad_asn, *tensors)


def _kind(axis_kind: Any) -> Kind:
    if not isinstance(axis_kind, str) or axis_kind not in _KINDS:
        validate.fail(ArgumentError, 'stack: axis_kind must be "output", "input" or "batch", '
                      f"got {validate.describe(axis_kind)}")
    return _KINDS[axis_kind]


def block_literal(values: Any) -> Any:
    """A nested literal whose leaves may be tensors: each list level stacks along a new
    output axis, each tuple level along an input axis, each ``oc.batch([...])`` level along
    a batch axis (outer levels lead). All-number displays stay plain data (``literal``).

    Example: ``oc.block_literal([[a, b], [c, d]])`` is a 2 x 2 block of the tensors'
    shape, as ``np.array([[a, b], [c, d]])`` of their values.
    """
    if not _has_tensor(values):
        return literal(values)
    return _stack_level(values)


def _has_tensor(values: Any) -> bool:
    if isinstance(values, Tensor):
        return True
    if isinstance(values, list | tuple):
        return any(_has_tensor(v) for v in values)
    return False


def _stack_level(values: Any) -> Any:
    if not isinstance(values, list | tuple):
        return values
    if not values:
        raise ShapeError("block literal: an empty level has no components", user_span())
    kind = "batch" if isinstance(values, BatchList) else (
        "input" if isinstance(values, tuple) else "output")
    parts = [_stack_level(v) for v in values]
    if all(not isinstance(p, Tensor) for p in parts):
        return literal(BatchList(parts) if kind == "batch" else type(values)(parts))
    return stack([_leaf(p) for p in parts], kind)


def _leaf(x: Any) -> Any:
    """A number among tensors is a rank-0 constant (`oc.number` would be a 1-vector)."""
    if isinstance(x, bool | int | float | np.floating | np.integer):
        return ndarray(np.asarray(float(x)), label=str(x))
    return x
