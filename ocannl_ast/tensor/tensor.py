"""Tensor: a node of the differentiable expression graph bundling a shape, a value node,
a grad node when differentiable, forward code and a gradient builder (seeds 000, 001).

Input: operations (`tensor.ops`) call `make_op`; leaves come from `tensor.leaves`.
Output: `forward` / `backprop` code for routines (`tensor.context`).
"""

from __future__ import annotations

import contextlib
import enum
import inspect
import itertools
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import numpy as np

from ..errors import ArgumentError, ShapeError, Span, user_span
from ..infer.constraints import Origin
from ..infer.logic import Logic, logic_name, shape_constraints
from ..infer.shape import Shape
from ..lowering.loop_ir import Buffer
from .code import Code, FetchItem, NodeRef, OpRecord, concat

_ids = itertools.count(1)

#: while an op_asn / grad_asn runs: the operation whose projections are in context
current_record: ContextVar[OpRecord | None] = ContextVar("current_record", default=None)
_no_grad: ContextVar[bool] = ContextVar("no_grad", default=False)


class Init(enum.Enum):
    """How a tensor's value comes about."""

    COMPUTED = "computed"  #: by its forward code
    PARAM = "param"  #: held out, initialized once per context; trainable
    CONST = "const"  #: held out, initialized once per context from data; not trainable
    NODE = "node"  #: persistent non-differentiable node written by @cd code (zeros at first)
    ALIAS = "alias"  #: a view of another tensor's value or grad node (inside @cd code)


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Tensors built inside are not differentiable (used for @cd sub-expressions)."""
    tok = _no_grad.set(True)
    try:
        yield
    finally:
        _no_grad.reset(tok)


def _ident(label: str) -> str:
    s = re.sub(r"\W", "_", label)
    return s if s and not s[0].isdigit() else f"t_{s}"


class Tensor:
    """A tensor expression node. Build with operators, `oc.einsum`, `oc.param`, ...

    Example: ``t = oc.ndarray([1.0, 2.0]) * 3.0; oc.infer_shapes(t); t.shape.output == (2,)``.
    """

    __array_priority__ = 1000  # NumPy scalars defer to our operators

    def __init__(self, label: str, shape: Shape, init: Init, *, diff: bool = False) -> None:
        self.id = next(_ids)
        self.label = label
        self.shape = shape
        self.init = init
        self.diff = diff
        self.op: OpRecord | None = None
        self.operands: list[Tensor] = []
        self.grad_asn: Callable[..., Code] | None = None
        self.slot: int | None = None  #: slot tag of @cd intermediates (see NodeRef.slot)
        self.alias_of: NodeRef | None = None
        self.init_value: Any = None  #: PARAM/CONST: number, ndarray or Tensor
        self.forward_root = True  #: not yet embedded in a consumer's forward code
        self._fwd: dict[int, Tensor] = {}  #: tensors whose own code forms the forward code
        self._own = Code()  #: this tensor's own op_asn code (without embedded children)
        self.init_code = Code()  #: PARAM/CONST with a tensor-expression init: the copy
        self._grad_code: Code | None = None

    # ---- nodes ---------------------------------------------------------------------

    def dims(self) -> tuple[int, ...]:
        return self.shape.dims()

    def layout_rows(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        return self.shape.batch, self.shape.output, self.shape.input

    def buffer(self, kind: str = "value") -> Buffer:
        if self.alias_of is not None:
            return self.alias_of.tensor.buffer(self.alias_of.kind if kind == "value" else kind)
        if kind == "grad" and not self.diff:
            raise ArgumentError(f"tensor '{self.label}' is not differentiable: it has no grad",
                                user_span())
        return Buffer(2 * self.id + (kind == "grad"),
                      _ident(self.label) + ("_grad" if kind == "grad" else ""), self.dims())

    @property
    def value(self) -> NodeRef:
        return NodeRef(self, "value", self.slot)

    @property
    def grad(self) -> NodeRef:
        return NodeRef(self, "grad", self.slot)

    @property
    def is_held_out(self) -> bool:
        return self.init in (Init.PARAM, Init.CONST, Init.NODE)

    # ---- code ----------------------------------------------------------------------

    @property
    def forward(self) -> Code:
        """This tensor's forward code, with each not-yet-consumed child embedded once, in
        creation order (a topological order: operands are created before consumers)."""
        return forward_code(self._fwd)

    def embed(self) -> dict[int, Tensor]:
        """Tensors whose code a consumer embeds: all of them the first time, then none."""
        if not self.forward_root or self.is_held_out:
            return {}
        self.forward_root = False
        return self._fwd

    def forward_all(self) -> Code:
        """Forward code of every computed tensor of the subgraph, each once, in creation
        order, whether or not another consumer embedded it (used by `oc.eval`)."""
        return concat(t._own for t in self.subgraph() if t.init is Init.COMPUTED)

    def grad_code(self) -> Code:
        """This operation's gradient assignments (its grad_asn), built once."""
        if self._grad_code is None:
            if self.grad_asn is None or self.op is None or not self.diff:
                self._grad_code = Code()
            else:
                self._grad_code = call_asn(self.grad_asn, self.op)
        return self._grad_code

    def subgraph(self) -> list[Tensor]:
        """Every tensor this one depends on through its operands (itself included), in
        creation order. A param's tensor initializer is not part of it: it runs once, in
        the init routine, so its tensors get no forward code, no gradient, no update."""
        seen: dict[int, Tensor] = {}
        stack = [self]
        while stack:
            t = stack.pop()
            if t.id in seen:
                continue
            seen[t.id] = t
            stack.extend(t.operands)
        return sorted(seen.values(), key=lambda t: t.id)

    @property
    def backprop(self) -> Code:
        """Zero the grads, seed this tensor's grad with 1, run every grad_asn in reverse
        creation order (a valid reverse topological order)."""
        if not self.diff:
            raise ArgumentError(f"tensor '{self.label}' is not differentiable: nothing to "
                                "backpropagate", user_span())
        diff = [t for t in self.subgraph() if t.diff]
        zero = Code(tuple(FetchItem(NodeRef(t, "grad"), _fill(0.0))
                          for t in diff if t is not self))
        seed = Code((FetchItem(NodeRef(self, "grad"), _fill(1.0)),))
        grads = concat(t.grad_code() for t in reversed(diff))
        return zero + seed + grads

    def params(self) -> list[Tensor]:
        """The trainable parameters this tensor depends on, in creation order."""
        return [t for t in self.subgraph() if t.init is Init.PARAM]

    def batch_slice(self, index: Any) -> Tensor:
        """The tensor at a runtime batch index (OCANNL `@|`): drops the leading batch axis."""
        from .ops import batch_slice

        return batch_slice(self, index)

    def __repr__(self) -> str:
        return f"Tensor({self.label}#{self.id}: {self.shape.describe()})"

    def __bool__(self) -> bool:
        raise ArgumentError("a Tensor has no truth value (use comparisons in code, or oc.eval)",
                            user_span())

    def __hash__(self) -> int:
        return self.id


def _fill(v: float) -> Any:
    from ..lowering.assignments import ConstantFill

    return ConstantFill(v)


_ASN_PARAMS: dict[Callable[..., Any], tuple[str, ...]] = {}

_SLOT_NAME = re.compile(r"(t|v|g|lhs|rhs)([1-9][0-9]*)?")


def slot_of_name(name: str) -> tuple[int, str] | None:
    """The slot and node kind an op_asn / grad_asn parameter names: `t v lhs` / `g` are
    the result's value / grad, `tK vK rhsK` / `gK` operand K's (any K >= 1)."""
    m = _SLOT_NAME.fullmatch(name)
    if m is None:
        return None
    head, num = m.group(1), m.group(2)
    if head == "lhs":
        return (0, "value") if num is None else None
    if head == "rhs" and num is None:
        return None
    return int(num or 0), "grad" if head == "g" else "value"


def call_asn(fn: Callable[..., Any], rec: OpRecord) -> Code:
    """Call an op_asn / grad_asn with the slot arguments it names (seed 000)."""
    if fn not in _ASN_PARAMS:
        _ASN_PARAMS[fn] = tuple(inspect.signature(fn).parameters)
    tensors = [rec.result, *rec.operands]
    kwargs: dict[str, Any] = {}
    for name in _ASN_PARAMS[fn]:
        if name == "projections":
            kwargs[name] = rec
        elif (sk := slot_of_name(name)) is not None:
            slot, kind = sk
            if slot >= len(tensors):
                raise ArgumentError(f"'{name}' names operand {slot} of '{rec.name}', which has "
                                    f"{len(rec.operands)}", user_span())
            t = tensors[slot]
            kwargs[name] = NodeRef(t, kind, slot) if kind == "value" or t.diff else None
        else:
            raise ArgumentError(f"parameter '{name}' of {getattr(fn, '__name__', fn)} is not a "
                                "slot name (t v g lhs, t1 v1 g1 rhs1, ..., projections)",
                                user_span())
    tok = current_record.set(rec)
    try:
        with no_grad():
            out = fn(**kwargs)
    finally:
        current_record.reset(tok)
    return out if isinstance(out, Code) else Code()


def make_op(name: str, logic: Logic, operands: list[Tensor], op_asn: Callable[..., Any],
            grad_asn: Callable[..., Any] | None, *, label: str | None = None,
            span: Span | None = None) -> Tensor:
    """Build a tensor operation: fresh result shape, shape constraints, forward code."""
    span = span or user_span()
    label = label or name
    shape = Shape.make(label)
    diff = (grad_asn is not None and not _no_grad.get()
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


def forward_code(tensors: dict[int, Tensor]) -> Code:
    """The own code of these tensors in creation order."""
    return concat(tensors[i]._own for i in sorted(tensors))


def _common_slot(operands: list[Tensor]) -> int | None:
    """An intermediate over operands of one slot (plus slotless ones) takes that slot."""
    slots = {o.slot for o in operands if o.slot is not None}
    return slots.pop() if len(slots) == 1 else None


def alias(ref: NodeRef) -> Tensor:
    """A non-differentiable tensor viewing a node (how @cd sub-expressions read v1, g, ...)."""
    t = Tensor(f"{ref.tensor.label}.{ref.kind}", ref.tensor.shape, Init.ALIAS)
    t.alias_of = NodeRef(ref.tensor, ref.kind)
    t.slot = ref.slot
    t.forward_root = False
    return t


def host_array(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float64)
