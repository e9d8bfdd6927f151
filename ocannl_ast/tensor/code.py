"""Tensor-level code: assignment items over node references whose projections are derived
lazily, once shapes are closed (seed 000: one inferred record, slot-permuted views).

Input: items built by `tensor.builders` (op_asn / grad_asn / @cd code). Output:
`materialize` turns a Code into the assignments IR (`lowering.assignments`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, assert_never

from ..errors import ShapeError, Span
from ..infer.logic import Logic
from ..infer.projections import derive_projections
from ..lowering import assignments as A
from ..lowering.loop_ir import BinOp, Buffer, IndexExpr, Symbol

if TYPE_CHECKING:
    from .tensor import Tensor


@dataclass(frozen=True, slots=True, eq=False)
class NodeRef:
    """A tensor's value or grad array as used in assignments; `slot` is its position in the
    operation whose projections are in context (0 = result, 1.. = operands)."""

    tensor: Tensor
    kind: str  #: "value" or "grad"
    slot: int | None = None

    @property
    def grad(self) -> NodeRef:
        return NodeRef(self.tensor, "grad", self.slot)

    @property
    def value(self) -> NodeRef:
        return NodeRef(self.tensor, "value", self.slot)

    def buffer(self) -> Buffer:
        return self.tensor.buffer(self.kind)

    def __repr__(self) -> str:
        return f"{self.tensor.label}.{self.kind}"


class OpRecord:
    """One operation: its logic, result and operands; projections derived once, memoized."""

    def __init__(self, logic: Logic, result: Tensor, operands: list[Tensor], name: str,
                 span: Span | None) -> None:
        self.logic = logic
        self.result = result
        self.operands = operands
        self.name = name
        self.span = span
        self._proj: A.Projections | None = None

    def projections(self) -> A.Projections:
        if self._proj is None:
            try:
                self._proj = derive_projections(
                    self.logic, self.result.layout_rows(), [o.layout_rows() for o in self.operands])
            except ShapeError as e:
                raise e.with_span(self.span) from None
        return self._proj


@dataclass(frozen=True, slots=True)
class AccumItem:
    """`lhs <accum> expr(rhs...)` with projections from an OpRecord (a slot view) or derived
    from its own OpRecord (producer regime)."""

    lhs: NodeRef
    accum: BinOp
    initialize_neutral: bool
    expr: A.RhsExpr
    rhs: tuple[NodeRef, ...]
    record: OpRecord  #: whose projections this assignment reads
    slots: tuple[int, ...] | None  #: lhs slot then rhs slots; None: the record's own order
    label: str = ""


@dataclass(frozen=True, slots=True)
class FetchItem:
    node: NodeRef
    op: A.FetchOp


@dataclass(frozen=True, slots=True)
class CheckItem:
    """Fail the routine unless 0 <= symbol < the leading batch dim of `tensor`."""

    symbol: Symbol
    tensor: Tensor
    code: int


Item = AccumItem | FetchItem | CheckItem


@dataclass(frozen=True, slots=True)
class Code:
    """A sequence of assignment items (what `@cd` functions return and routines compile)."""

    items: tuple[Item, ...] = field(default=())

    def __add__(self, other: Code) -> Code:
        return Code(self.items + other.items)

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)

    def tensors(self) -> list[Tensor]:
        """Every tensor the code touches, each once, in order of appearance."""
        seen: dict[int, Tensor] = {}
        for it in self.items:
            for ref in _refs(it):
                seen.setdefault(ref.tensor.id, ref.tensor)
        return list(seen.values())


def concat(codes: Iterable[Code]) -> Code:
    out: tuple[Item, ...] = ()
    for c in codes:
        out += c.items
    return Code(out)


def _refs(it: Item) -> tuple[NodeRef, ...]:
    match it:
        case AccumItem(lhs=lhs, rhs=rhs):
            return (lhs, *rhs)
        case FetchItem(node=n):
            return (n,)
        case CheckItem(tensor=t):
            return (NodeRef(t, "value"),)
        case _:
            assert_never(it)


def _slot_index(p: A.Projections, ref: NodeRef, record: OpRecord) -> tuple[IndexExpr, ...]:
    """Index map of a tensor that has no slot in the record: only size-one axes allowed."""
    dims = ref.tensor.dims()
    if any(d != 1 for d in dims):
        raise ShapeError(f"'{ref.tensor.label}' (dims {dims}) has no slot in the projections of "
                         f"'{record.name}'; name it by slot (v1, g2, x_rhs1, ...)", record.span)
    return tuple(IndexExpr((), 0) for _ in dims)


def materialize_item(it: Item) -> A.Asgn:
    match it:
        case AccumItem():
            p = it.record.projections()
            if it.slots is not None:
                p = _view(p, it)
            return A.Accum(it.lhs.buffer(), it.accum, it.initialize_neutral, it.expr,
                           tuple(r.buffer() for r in it.rhs), p, it.label)
        case FetchItem(node=n, op=op):
            return A.Fetch(n.buffer(), op)
        case CheckItem(symbol=s, tensor=t, code=c):
            return A.CheckStatic(s, t.dims()[0], c)
        case _:
            assert_never(it)


def _view(p: A.Projections, it: AccumItem) -> A.Projections:
    assert it.slots is not None
    refs = (it.lhs, *it.rhs)
    maps: list[tuple[tuple[IndexExpr, ...], tuple[int, ...]]] = []
    for ref, s in zip(refs, it.slots, strict=True):
        maps.append(p.slot(s) if s >= 0 else (_slot_index(p, ref, it.record), ref.tensor.dims()))
    return A.Projections(p.product, maps[0][0], tuple(m for m, _ in maps[1:]), maps[0][1],
                         tuple(d for _, d in maps[1:]), p.debug)


def materialize(code: Code) -> A.Asgn:
    """Assignments IR for closed shapes (callers close the shapes first)."""
    return A.seq(*(materialize_item(it) for it in code.items))
