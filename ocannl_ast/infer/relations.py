"""Operation logics (seed 002 `Shape.logic`) and their row relations: the ONE table both
shape inference (`infer.logic.shape_constraints`) and projection derivation
(`infer.projections`) read (seed 000: projections re-read the constraints of the shapes).

A relation names rows by tensor slot (0 the result, k >= 1 the k-th operand) and kind.
Shape inference reads `RowBroadcast` as a broadcast inequality and `RowSame` as an
equality; projections read them as "iterate together" (a size-1 broadcast axis fixed at 0).
A new logic gets one entry in `row_relations`; a logic missing there fails in both.

Input: a Logic and its operand count. Output: the relations, in a fixed order.
"""

from __future__ import annotations

from typing import assert_never

from ..errors import ShapeError
from ..lowering.loop_ir import Symbol
from ..records import record
from .spec_ast import Affine, Concat, EinsumSpec, FixedIndex, Label, Wildcard
from .spec_parser import parse_spec
from .terms import Kind


@record
class Pointwise:
    """NumPy-style broadcast of every operand into the result (unary or n-ary)."""


@record
class Compose:
    """Outputs of the second operand meet inputs of the first (`a @ b`, matmul generalised)."""


@record
class Transpose:
    """Swap inputs and outputs of the single operand; batch axes kept."""


@record
class Einsum:
    """Axes lined up by an einsum spec; an operand's size-1 axes and row variables broadcast
    against the spec's labels and row variables (`exact_labels`: those that do not)."""

    spec: EinsumSpec


@record
class BatchSlice:
    """Drop the leading batch axis, read at a runtime index (a routine's static argument)."""

    symbol: Symbol


@record
class Stack:
    """Stacking (seed 004): `count` equally shaped operands along a new axis of size
    `count` leading the result's `kind` row; the k-th operand fills position k."""

    kind: Kind
    count: int


@record
class Terminal:
    """A leaf: the shape comes from its creation (data, parameter dims)."""


Logic = Pointwise | Compose | Transpose | Einsum | BatchSlice | Stack | Terminal


@record
class RowRef:
    """Row `kind` of tensor slot `slot` (0 the result, k the k-th operand)."""

    slot: int
    kind: Kind


@record
class RowBroadcast:
    """`cur >= sub`: sub broadcasts into cur (aligned from the right)."""

    cur: RowRef
    sub: RowRef


@record
class RowSame:
    """The two rows are equal, axis for axis."""

    a: RowRef
    b: RowRef


@record
class DropLeadingAxis:
    """`row` is `whole` without its first axis, which is read at the runtime `symbol`."""

    row: RowRef
    whole: RowRef
    symbol: Symbol


@record
class StackAxis:
    """`part` is `whole` without its first axis, of size `count`, where `part` is the
    summand at position `index` (shape inference: a fixed size; projections: one size-1
    component of the regular coupled factor, seed 004)."""

    part: RowRef
    whole: RowRef
    index: int
    count: int


@record
class SpecRows:
    """Every row of every slot matches its row in the einsum spec (labels, `...` row
    variables, fixed indices, affine/convolution axes): the result's exactly, an operand's
    up to broadcasting (a labeled axis of size 1 under a larger label, read at 0; a row
    variable's axes likewise, and possibly fewer of them, aligned from the right)."""

    spec: EinsumSpec


Relation = RowBroadcast | RowSame | DropLeadingAxis | StackAxis | SpecRows

_B, _O, _I = Kind.BATCH, Kind.OUTPUT, Kind.INPUT


def _ge(cur: int, ck: Kind, sub: int, sk: Kind) -> RowBroadcast:
    return RowBroadcast(RowRef(cur, ck), RowRef(sub, sk))


_POINTWISE: dict[int, tuple[Relation, ...]] = {}  #: operand count -> pointwise relations


def row_relations(logic: Logic, n_operands: int) -> tuple[Relation, ...]:
    """The row relations of an operation with this logic and number of operands.

    Example: ``row_relations(Transpose(), 1)`` relates the result's inputs to the operand's
    outputs and vice versa.
    """
    match logic:
        case Pointwise():
            got = _POINTWISE.get(n_operands)
            if got is None:  # the same few tuples for every pointwise operation: built once
                got = _POINTWISE[n_operands] = tuple(
                    _ge(0, k, a, k) for a in range(1, n_operands + 1) for k in (_B, _O, _I))
            return got
        case Compose():
            _arity(logic, n_operands, 2)
            return (_ge(0, _B, 1, _B), _ge(0, _B, 2, _B), _ge(0, _I, 2, _I), _ge(0, _O, 1, _O),
                    _ge(1, _I, 2, _O))
        case Transpose():
            _arity(logic, n_operands, 1)
            return _ge(0, _B, 1, _B), _ge(0, _I, 1, _O), _ge(0, _O, 1, _I)
        case Einsum(spec=spec):
            return (SpecRows(spec),)
        case BatchSlice(symbol=sym):
            _arity(logic, n_operands, 1)
            return (DropLeadingAxis(RowRef(0, _B), RowRef(1, _B), sym),
                    RowSame(RowRef(0, _O), RowRef(1, _O)), RowSame(RowRef(0, _I), RowRef(1, _I)))
        case Stack(kind=kind, count=n):
            _arity(logic, n_operands, n)
            return tuple(r for a in range(1, n + 1) for r in _stack_rows(kind, a, n))
        case Terminal():
            return ()
        case _:
            assert_never(logic)  # a logic missing from this table: both consumers fail


def exact_labels(spec: EinsumSpec) -> frozenset[str]:
    """Labels whose operand axes do not broadcast: those an affine or concatenation axis
    computes with (a size-1 kernel axis is a kernel of size 1, not a broadcast). Every
    other operand axis with a label, and every operand row variable, broadcasts into the
    spec's (label >= operand axis: equal or 1; NumPy-like, seed 002 Pointwise_bin)."""
    out: set[str] = set()
    for ss in (spec.result, *spec.operands):
        for rs in (ss.batch, ss.output, ss.input):
            for ax in () if rs is None else rs.beg + rs.end:
                match ax:
                    case Affine(over=over, conv=conv):
                        out |= {over} if conv is None else {over, conv.kernel}
                    case Concat(components=cs):
                        out |= {c.name for c in cs if isinstance(c, Label)}
                    case Label() | FixedIndex() | Wildcard():
                        pass
                    case _:
                        assert_never(ax)
    return frozenset(out)


def _stack_rows(kind: Kind, a: int, n: int) -> tuple[Relation, ...]:
    """Operand `a` of a stack: the stacked row gains the new axis, the others are equal."""
    return tuple(StackAxis(RowRef(a, k), RowRef(0, k), a - 1, n) if k == kind
                 else RowSame(RowRef(0, k), RowRef(a, k)) for k in (_B, _O, _I))


def _arity(logic: Logic, n_operands: int, n: int) -> None:
    if n_operands != n:
        raise ShapeError(f"{logic_name(logic)} takes {n} operand(s), got {n_operands}")


def logic_of_string(text: str) -> Logic:
    """`"."` pointwise, `"@"` compose, `"T"` transpose, anything else an einsum spec.

    Example: ``logic_of_string("ij;jk=>ik")``.
    """
    match text:
        case ".":
            return Pointwise()
        case "@":
            return Compose()
        case "T":
            return Transpose()
        case _:
            return Einsum(parse_spec(text))


def logic_name(logic: Logic) -> str:
    match logic:
        case Pointwise():
            return "pointwise"
        case Compose():
            return "compose"
        case Transpose():
            return "transpose"
        case Einsum(spec=spec):
            return f'einsum "{spec.text}"'
        case BatchSlice():
            return "batch_slice"
        case Stack(kind=kind, count=n):
            return f"stack of {n} along {kind.value}"
        case Terminal():
            return "terminal"
        case _:
            return type(logic).__name__  # a name for messages only


def row_var_key(name: str, kind: Kind) -> str:
    """As in OCANNL, the ellipsis `...` is a different row variable in each row kind (batch,
    input, output); a named `..v..` is one variable wherever it appears."""
    return f"...{kind.value}" if name == "..." else name
