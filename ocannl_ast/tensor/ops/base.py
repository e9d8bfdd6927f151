"""Building an operation (the op library's core): lift operands, add the result's shape
constraints, call the op_asn for forward code, attach the grad_asn; fuse pointwise ops
inside @cd code. Input: name, logic, op_asn / grad_asn, operands. Output: a result Tensor
(or a fused primitive). The custom-op constructors are in `custom`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...errors import ShapeError, Span, user_span
from ...infer.constraints import Origin
from ...infer.logic import Logic, logic_name, shape_constraints
from ...infer.shape import Shape
from .. import validate
from ..builders import PrimCall, prim
from ..leaves import ndarray, number
from ..node import (
    Code,
    Init,
    NodeRef,
    OpRecord,
    StaticIndex,
    Tensor,
    call_asn,
    current_record,
    grad_disabled,
)

Asn = Callable[..., Code]


def lift(x: Any) -> Tensor:
    """Numbers become constants, node references views, lists/arrays literals."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, NodeRef):
        return alias(x)
    if isinstance(x, bool | int | float | np.floating | np.integer):
        return number(float(x))
    if isinstance(x, list | tuple | np.ndarray):
        return ndarray(x)
    validate.not_a_tensor(x)


def apply(name: str, logic: Logic, op_asn: Asn, grad_asn: Asn | None, *xs: Any,
          fuse: bool = False) -> Any:
    """Build the operation; a `fuse` (pointwise) operation inside an operation's @cd code
    (projections in context) over slot nodes is fused into the assignment as the primitive
    `name` instead of becoming an intermediate tensor (the intermediate is virtualized)."""
    if fuse and _fusable(xs, current_record.get() is not None):
        return prim(name, *xs)
    return make_op(name, logic, [lift(x) for x in xs], op_asn, grad_asn, span=user_span())


def fuses(*xs: Any) -> bool:
    """Whether a pointwise operation over `xs` fuses into the @cd assignment being built
    (see `apply`): composite operations then build their primitive tree directly."""
    return _fusable(xs, current_record.get() is not None)


def _fusable(xs: tuple[Any, ...], in_operation: bool) -> bool:
    """Primitive trees and static indices always fuse; slot nodes fuse inside an operation."""
    if not all(isinstance(x, NodeRef | PrimCall | StaticIndex | bool | int | float) for x in xs):
        return False
    return any(isinstance(x, PrimCall | StaticIndex) for x in xs) or (
        in_operation and any(isinstance(x, NodeRef) for x in xs))


def make_op(name: str, logic: Logic, operands: list[Tensor], op_asn: Callable[..., Any],
            grad_asn: Callable[..., Any] | None, *, label: str | None = None,
            span: Span | None = None) -> Tensor:
    """Build a tensor operation: fresh result shape, shape constraints, forward code."""
    span = span or user_span()
    label = label or name
    shape = Shape.make(label)
    diff = (grad_asn is not None and not grad_disabled()
            and any(o.diff for o in operands))
    t = Tensor(label, shape, Init.COMPUTED, diff=diff)
    origin = Origin(f"{name} ({logic_name(logic)})", (shape, *[o.shape for o in operands]), span)
    try:
        shape.solver.add(shape_constraints(logic, shape.solver, shape,
                                           [o.shape for o in operands], origin))
    except ShapeError as e:
        raise e.with_span(span) from None
    t.op = OpRecord(logic, t, operands, name, span)
    t.operands = list(operands)
    t.grad_asn = grad_asn
    t.slot = _common_slot(operands)
    for o in operands:
        t._fwd.update(o.embed())
    t._own = call_asn(op_asn, t.op)
    t._fwd[t.id] = t
    return t


def _common_slot(operands: list[Tensor]) -> int | None:
    """An intermediate over operands of one slot (plus slotless ones) takes that slot."""
    slots = {o.slot for o in operands if o.slot is not None}
    return slots.pop() if len(slots) == 1 else None


def alias(ref: NodeRef) -> Tensor:
    """A non-differentiable tensor viewing a node (how @cd sub-expressions read v1, g, ...)."""
    t = Tensor(f"{ref.tensor.label}.{ref.kind.value}", ref.tensor.shape, Init.ALIAS)
    t.alias_of = NodeRef(ref.tensor, ref.kind)
    t.slot = ref.slot
    t.forward_root = False
    return t
