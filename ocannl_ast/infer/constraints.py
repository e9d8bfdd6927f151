"""Shape constraints (seed 002): equalities and broadcast inequalities over dims and rows,
plus the Total_elems row constraint and the at-least bound of fixed indices. Each carries
the origin that produced it.

Input: emitted by `infer.logic` (reading `infer.relations`). Output: consumed by
`infer.solver` and `infer.propagate`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Protocol, TypeVar, assert_never

from ..errors import ShapeError, Span
from ..records import record
from .terms import DimTerm, Row, dim_vars, row_vars

T = TypeVar("T")


class ShapeLike(Protocol):
    """What an origin needs from a tensor's shape to describe it in a message."""

    label: str

    def describe(self) -> str: ...


@record
class Origin:
    """Who asked for a constraint: the operation, its tensors, the user line, and where."""

    op: str  #: operation name, e.g. "add" or "einsum ij;jk=>ik"
    tensors: tuple[ShapeLike, ...] = ()  #: result first, then operands
    span: Span | None = None  #: the user source line that built the operation
    where: str = ""  #: e.g. "output row" or "output axis -1"

    def at(self, where: str) -> Origin:
        return Origin(self.op, self.tensors, self.span, where)

    def describe(self) -> str:
        names = ", ".join(f"{t.label}: {_abbrev(t.describe())}" for t in self.tensors)
        loc = f" ({self.where})" if self.where else ""
        return f"operation '{self.op}'{loc} on [{names}]"


NO_ORIGIN = Origin("?")


def conflict(origin: Origin, fact: str) -> ShapeError:
    """The ShapeError of a fact that contradicts `origin`'s operation, quoting its line."""
    hint = _multichar_hint(origin.op) if fact.startswith("rank mismatch") else ""
    return ShapeError(f"{origin.describe()}: {fact}{hint}", origin.span)


def _multichar_hint(op: str) -> str:
    """A rank mismatch in a spec that `,` `*` `+` switched to multi-character labels, where
    a label of several letters was likely meant as several axes (`"ij=>0,0"`)."""
    import re

    from .spec_parser import is_multichar, parse_spec, spec_labels

    found = re.search(r'"([^"]*)"', op)
    if found is None or not is_multichar(found.group(1)):
        return ""
    try:
        long = sorted(x for x in spec_labels(parse_spec(found.group(1)))
                      if len(x) > 1 and x.isalpha())
    except Exception:  # noqa: BLE001 (a hint only: a spec that does not parse gives none)
        return ""
    if not long:
        return ""
    return (f" (the spec uses multi-character labels, as its ',' '*' or '+' ask: '{long[0]}' "
            f"is one axis; write '{','.join(long[0])}' for {len(long[0])} axes)")


def _abbrev(text: str, limit: int = 100) -> str:
    """A shape description cut short (a runaway row-rank cycle has dozens of axes)."""
    return text if len(text) <= limit else text[:limit - 3] + "..."


@record
class DimEq:
    a: DimTerm
    b: DimTerm
    origin: Origin = field(default=NO_ORIGIN, compare=False)


@record
class RowEq:
    a: Row
    b: Row
    origin: Origin = field(default=NO_ORIGIN, compare=False)


@record
class DimIneq:
    """cur >= subr in the broadcast order: subr == cur, or subr == 1."""

    cur: DimTerm
    subr: DimTerm
    origin: Origin = field(default=NO_ORIGIN, compare=False)
    #: an einsum label over an operand's axis (closing: a parameter's dim under a label
    #: that nothing else bounds is undetermined, as when the label was the axis)
    label: bool = field(default=False, compare=False)


@record
class RowIneq:
    """cur >= subr: cur has at least subr's axes; aligned from the right, dim-wise >=."""

    cur: Row
    subr: Row
    origin: Origin = field(default=NO_ORIGIN, compare=False)


@record
class RowBcast:
    """cur >= subr with as many axes: an einsum operand's row variable under the spec's
    (per-axis broadcasting only, no extra or missing axes)."""

    cur: Row
    subr: Row
    origin: Origin = field(default=NO_ORIGIN, compare=False)


@record
class TotalElems:
    """The row's axes multiply to exactly `n` elements."""

    row: Row
    n: int
    origin: Origin = field(default=NO_ORIGIN, compare=False)


@record
class DimAtLeast:
    """The dim has at least `n` positions: an einsum fixed index `n - 1` addresses it."""

    d: DimTerm
    n: int
    origin: Origin = field(default=NO_ORIGIN, compare=False)


@record
class StridedVar:
    """Seed 001's Strided_var numerator: `coeff * var` elements, `var` a dim to solve (the
    element count at the other end of a vectorized operation)."""

    coeff: int
    var: DimTerm


@record
class RowsTotal:
    """Seed 001's Total_elems over a whole tensor: its rows (row variables included) have
    `numerator` elements: a literal count (Num_elems) or a StridedVar. Solved by
    `infer.elems`."""

    rows: tuple[Row, ...]
    numerator: int | StridedVar
    origin: Origin = field(default=NO_ORIGIN, compare=False)


@record
class ConcatSum:
    """A concatenated axis (seed 004): `total` is the sum of `parts`; `discardable` marks
    the parts the spec lets fall to 0 (the empty summand, guessed by closing)."""

    total: DimTerm
    parts: tuple[DimTerm, ...]
    discardable: tuple[bool, ...]
    origin: Origin = field(default=NO_ORIGIN, compare=False)


Constraint = (DimEq | RowEq | DimIneq | RowIneq | RowBcast | TotalElems | DimAtLeast
              | ConcatSum | RowsTotal)


class Substitution(Protocol):
    """What reading a constraint's current variables needs from a solver."""

    def subst_dim(self, d: DimTerm) -> DimTerm: ...

    def subst_row(self, r: Row) -> Row: ...


def _same(x: T) -> T:
    return x


def constraint_vars(c: Constraint, out: set[tuple[str, int]],
                    s: Substitution | None = None) -> None:
    """The variables of a constraint (substituted through `s` when given)."""
    if s is None and type(c) is RowIneq:  # (a stuck inequality parked as read: hot)
        row_vars(c.cur, out)
        row_vars(c.subr, out)
        return
    sd: Callable[[DimTerm], DimTerm] = s.subst_dim if s is not None else _same
    sr: Callable[[Row], Row] = s.subst_row if s is not None else _same
    match c:
        case DimEq(a=a, b=b) | DimIneq(cur=a, subr=b):
            dim_vars(sd(a), out)
            dim_vars(sd(b), out)
        case RowEq(a=a, b=b) | RowIneq(cur=a, subr=b) | RowBcast(cur=a, subr=b):
            row_vars(sr(a), out)
            row_vars(sr(b), out)
        case TotalElems(row=r):
            row_vars(sr(r), out)
        case DimAtLeast(d=d):
            dim_vars(sd(d), out)
        case RowsTotal(rows=rs, numerator=num):
            for r in rs:
                row_vars(sr(r), out)
            if isinstance(num, StridedVar):
                dim_vars(sd(num.var), out)
        case ConcatSum(total=t, parts=ps):
            for d in (t, *ps):
                dim_vars(sd(d), out)
        case _:
            assert_never(c)
