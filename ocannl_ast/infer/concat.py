"""Concatenation (seed 004): the discardable-variable test, the size reading of a
concatenated axis (a sum, with dimension 0 for the empty summand) and its closing rule.

The discardable set is computed up front from the spec: a component variable `v` of a
concatenation on one side is discardable when, for every shape on the other side, some
axis has all its components in the complement of `v` (the other components of `v`'s
concatenation). Closing guesses discardable components to 0, all others to 1.

Input: an einsum spec; ConcatSum constraints. Output: discardability verdicts; bindings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ShapeError
from .constraints import ConcatSum, DimEq, Origin
from .spec_ast import AxisSpec, Concat, EinsumSpec, Label, ShapeSpec
from .terms import Dim, DimTerm, DimVar, Kind, dim_size, show_dim

if TYPE_CHECKING:
    from .lub import Bounds
    from .state import SolverState

#: (slot: 0 the result, k the k-th operand; row kind; position in the row's beg + end)
AxisKey = tuple[int, Kind, int]


def _rows(ss: ShapeSpec) -> list[tuple[Kind, tuple[AxisSpec, ...]]]:
    out = []
    for kind, rs in ((Kind.BATCH, ss.batch), (Kind.OUTPUT, ss.output), (Kind.INPUT, ss.input)):
        if rs is not None:
            out.append((kind, rs.beg + rs.end))
    return out


def _components(ax: AxisSpec) -> set[str] | None:
    """The component labels of an axis (None: an axis no label set can cover)."""
    match ax:
        case Label(name=n):
            return {n}
        case Concat(components=cs):
            labels = {c.name for c in cs if isinstance(c, Label)}
            return labels or None
        case _:
            return None


def _covered(shape: ShapeSpec, complement: set[str]) -> bool:
    """Some axis of the shape has every component in the complement."""
    for _, axes in _rows(shape):
        for ax in axes:
            comps = _components(ax)
            if comps is not None and comps <= complement:
                return True
    return False


def discardable(spec: EinsumSpec) -> dict[AxisKey, tuple[bool, ...]]:
    """Per concatenated axis of the spec, which of its components are discardable.

    Example: for "a^b => a", the operand's axis gets (False, True): b may be empty.
    """
    shapes = [spec.result, *spec.operands]
    out: dict[AxisKey, tuple[bool, ...]] = {}
    for slot, ss in enumerate(shapes):
        others = shapes[1:] if slot == 0 else [spec.result]
        for kind, axes in _rows(ss):
            for pos, ax in enumerate(axes):
                if isinstance(ax, Concat):
                    out[(slot, kind, pos)] = _verdicts(ax, others)
    return out


def _verdicts(ax: Concat, others: list[ShapeSpec]) -> tuple[bool, ...]:
    flags = []
    for k in range(len(ax.components)):
        complement = {c.name for j, c in enumerate(ax.components)
                      if j != k and isinstance(c, Label)}
        flags.append(bool(others) and all(_covered(o, complement) for o in others))
    return tuple(flags)


# ---- the size reading: a concatenated axis is the sum of its components -----------------

def process_sum(s: SolverState, c: ConcatSum) -> bool:
    """`total == sum(parts)`: solve the one unknown part (or the total), check known sums.
    False while two or more parts are unknown (closing guesses them)."""
    total = s.subst_dim(c.total)
    parts = [s.subst_dim(p) for p in c.parts]
    known = sum(n for p in parts if (n := dim_size(p)) is not None)
    unknown = [p for p in parts if dim_size(p) is None]
    t = dim_size(total)
    if not unknown:
        s.queue.append(DimEq(total, Dim(known), c.origin))
        return True
    if t is not None and known > t:
        raise _contradiction(c, parts, t)
    ids = {p for p in unknown}
    if t is not None and len(ids) == 1:
        v = unknown[0]
        m = len(unknown)
        if (t - known) % m:
            raise _contradiction(c, parts, t)
        s.queue.append(DimEq(v, Dim((t - known) // m), c.origin))
        return True
    if t is None and isinstance(total, DimVar):
        _unify_componentwise(s, c, total)
    return False


def _contradiction(c: ConcatSum, parts: list[DimTerm], total: int) -> ShapeError:
    shown = " ^ ".join(show_dim(p) for p in parts)
    return ShapeError(f"{c.origin.describe()}: contradictory component sizes: the "
                      f"concatenated axis {shown} must have size {total}", c.origin.span)


def _almost_all_discardable(c: ConcatSum) -> bool:
    return sum(c.discardable) >= len(c.parts) - 1


def _unify_componentwise(s: SolverState, c: ConcatSum, total: DimVar) -> None:
    """Two concatenations of one axis with equally many components unify component-wise,
    unless one is almost all discardable: that one stays a sum (an inequality in effect),
    so its one live component is inferred from context."""
    if _almost_all_discardable(c):
        return
    for _, other in s.stuck_watching(("d", total.id)):
        if (isinstance(other, ConcatSum) and other is not c
                and len(other.parts) == len(c.parts) and not _almost_all_discardable(other)
                and s.subst_dim(other.total) == total):
            s.queue.extend(DimEq(a, b, c.origin) for a, b in zip(c.parts, other.parts,
                                                                   strict=True))


def close_step(s: SolverState, bounds: Bounds) -> bool:
    """Closing's guess for concatenations left open: the first unknown discardable
    component of a pending sum becomes 0 (the empty summand); without any, unknown
    components of a sum whose total is also unknown become 1. A known total split between
    two unknown components that carry data is ambiguous: a ShapeError."""
    pending = [c for c in s.stuck() if isinstance(c, ConcatSum)]
    o = Origin("closing shapes: concatenation")
    # an unknown total or component that a use bounds from above (an einsum label over
    # it, a pointwise result it broadcasts into) takes that bound first, as a variable
    # goes up to its least upper bound (seed 002): the context fixes it (seed 004: the
    # sum is an inequality, not an equation, so the live component is inferred from
    # context); guessing the discardable summand first would size it from the data alone
    for c in pending:
        for p in (c.total, *c.parts):
            v = s.subst_dim(p)
            if isinstance(v, DimVar):
                n = bounds.lub_dim(v.id)
                if n is not None:
                    s.bind_dim(v, n, o)
                    return True
    if close_units(s, bounds):
        return True
    for c in pending:
        for p, flag in zip(c.parts, c.discardable, strict=True):
            v = s.subst_dim(p)
            if flag and isinstance(v, DimVar):
                s.bind_dim(v, Dim(0), o)
                return True
    for c in pending:
        if dim_size(s.subst_dim(c.total)) is not None:
            names = ", ".join(show_dim(s.subst_dim(p)) for p in c.parts
                              if dim_size(s.subst_dim(p)) is None)
            raise ShapeError(f"{c.origin.describe()}: cannot tell how the concatenated axis "
                             f"splits between components {names}; give their sizes "
                             "(e.g. an integer component such as 3^b)", c.origin.span)
    # the innermost first: a component that is itself the total of another pending sum
    # is sized by that sum's components, not guessed
    totals = {t.id for c in pending if isinstance(t := s.subst_dim(c.total), DimVar)}
    unknown = [v for c in pending for p in c.parts if isinstance(v := s.subst_dim(p), DimVar)]
    inner = [v for v in unknown if v.id not in totals]
    for v in inner or unknown:
        s.bind_dim(v, Dim(1), o)
        return True
    return False


def close_units(s: SolverState, bounds: Bounds) -> bool:
    """A pending sum's unknown total or component that is a computed size-1 axis (a
    pointwise result of size-1 axes: only size-1 axes bound it from below, and no use
    bounds it from above) is 1, as data of size 1 would be, before any guess (issue 21:
    a value's meaning must not depend on whether its size-1 axis came from data or from
    an operation)."""
    o = Origin("closing shapes: concatenation")
    for c in s.stuck():
        if not isinstance(c, ConcatSum):
            continue
        for p in (c.total, *c.parts):
            v = s.subst_dim(p)
            if isinstance(v, DimVar) and bounds.is_unit(v) and bounds.dim_lub(v.id) is None:
                s.bind_dim(v, Dim(1), o)
                return True
    return False
