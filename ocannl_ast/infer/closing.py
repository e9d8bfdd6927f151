"""Closing shapes (seed 002): solve every variable of some shapes, leaves upward to their
least upper bounds (`infer.lub`), interiors down to dimension 1 / no more axes. A parameter
whose dims nothing determines is a ShapeError naming it.

Input: a solver (its component) and the shapes to close. Output: bindings in the solver.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ..errors import ShapeError
from . import concat
from .constraints import Origin, RowEq
from .lub import Bounds, one_bounded_ids
from .terms import Dim, DimVar, Row, RowVar, dim_vars

if TYPE_CHECKING:
    from .state import SolverState


class ClosableShape(Protocol):
    """What closing needs to know about a tensor's shape."""

    label: str
    is_param: bool
    is_terminal: bool

    def raw_rows(self) -> tuple[Row, Row, Row]:
        """batch, output, input rows as terms (unsubstituted is fine)."""
        ...


RowOccs = dict[int, list[tuple[ClosableShape, int]]]  #: row var -> (shape, row index)
DimOccs = dict[int, list[ClosableShape]]  #: dim var -> shapes


def close(s: SolverState, shapes: list[ClosableShape]) -> None:
    """Close `shapes` in `s` (run inside `Solver.atomically`)."""
    read: dict[int, _Read] = {}
    for _ in range(10_000):
        s.run()
        # a shape with no variable left never gets one back: later rounds skip it
        rows, dims, shapes = _unsolved(s, shapes, read)
        if not rows and not dims:
            return
        if not _close_step(s, rows, dims):
            raise ShapeError("internal: closing made no progress")
    raise ShapeError("shape closing did not terminate")


#: a shape's rows as last read: per row, its unbound row variable (or None) and the ids of
#: its unbound dim variables; while none of them is bound, reading again gives the same
_Read = tuple[tuple[int | None, tuple[int, ...]], ...]


def _unsolved(s: SolverState, shapes: list[ClosableShape], read: dict[int, _Read] | None = None
              ) -> tuple[RowOccs, DimOccs, list[ClosableShape]]:
    """The unsolved row and dim variables with the shapes holding them, and those shapes
    (`read`: the shapes' rows as the previous round read them, by shape id; kept up to
    date, so a shape none of whose variables was bound since is not read again)."""
    rows: RowOccs = {}
    dims: DimOccs = {}
    open_shapes: list[ClosableShape] = []
    bound_rows, bound_dims = s.rows, s.dims
    for sh in shapes:
        got = read.get(id(sh)) if read is not None else None
        stale = got is None
        if got is not None:
            for v, ids in got:  # (a loop, no generator per shape: hot)
                if v is not None and v in bound_rows:
                    stale = True
                    break
                for i in ids:
                    if i in bound_dims:
                        stale = True
                        break
                if stale:
                    break
        if got is None or stale:
            got = _read(s, sh)
            if read is not None:
                read[id(sh)] = got
        solved = True
        for kind_ix, (v, ids) in enumerate(got):
            if v is not None:
                rows.setdefault(v, []).append((sh, kind_ix))
                solved = False
            if ids:
                for i in ids:
                    dims.setdefault(i, []).append(sh)
                solved = False
        if not solved:
            open_shapes.append(sh)
    return rows, dims, open_shapes


def _read(s: SolverState, sh: ClosableShape) -> _Read:
    """The unbound variables of each of the shape's rows, substituted now."""
    out: list[tuple[int | None, tuple[int, ...]]] = []
    for r in sh.raw_rows():
        r = s.subst_row(r)
        if r.var is not None and not s.owns(r.var.id):
            raise ShapeError(f"internal: shape '{sh.label}' belongs to another shape "
                             "component")
        keys: set[tuple[str, int]] | None = None
        for part in (r.beg, r.dims):
            for d in part:
                if type(d) is not Dim:
                    if keys is None:
                        keys = set()
                    dim_vars(d, keys)
        out.append((None if r.var is None else r.var.id,
                    tuple(i for _, i in keys) if keys else ()))
    return tuple(out)


def _close_step(s: SolverState, rows: RowOccs, dims: DimOccs) -> bool:
    o = Origin("closing shapes")
    bounds = Bounds(s)
    leaf_rows: set[int] = set()
    param_out: set[int] = set()
    for v, occ in rows.items():  # (one pass, no generator per variable: hot)
        for sh, k in occ:
            if sh.is_terminal:
                leaf_rows.add(v)
            if k == 1 and sh.is_param:
                param_out.add(v)
    leaf_dims = {v for v, occ in dims.items() if any(sh.is_terminal for sh in occ)}
    row_lubs = {v: n for v in leaf_rows if (n := bounds.row_lub_len(v)) is not None
                and (n > 0 or v not in param_out)}
    if row_lubs:
        for v, n in sorted(row_lubs.items()):
            fresh = tuple(s.fresh_dim() for _ in range(n))
            s.bind_row(RowVar(v), Row.closed(fresh), o)
        return True
    dim_lubs = {v: d for v in leaf_dims if (d := bounds.lub_dim(v)) is not None}
    for v in sorted(v for v, d in dim_lubs.items() if d.size == 1):  # (conflicts give 1)
        _check_param_broadcast(bounds, dims, v)
    if dim_lubs:
        for v, d in sorted(dim_lubs.items()):
            s.bind_dim(DimVar(v), d, o)
        return True
    if _close_ambiguous_row_eqs(s, o):
        return True
    interior_rows = sorted(set(rows) - leaf_rows)
    if interior_rows:
        for v in interior_rows:
            s.bind_row(RowVar(v), Row.closed(()), o)
        return True
    if leaf_rows:
        _close_leaf_rows_empty(s, sorted(leaf_rows), rows, o)
        return True
    if concat.close_step(s, bounds):  # the empty summand (0) before the broadcast unit (1)
        return True
    return _close_dims(s, bounds, dims, leaf_dims, o)


def _close_ambiguous_row_eqs(s: SolverState, o: Origin) -> bool:
    """An equation of two open rows that waits on their overlap (`h ++ ..c..` vs
    `..r.. ++ 3,4,2`, see `infer.propagate._row_eq_open`): the row variable on the side
    with more known axes closes to no more axes first (the other way round could not
    fit), so `h` binds to the first real axis rather than to an invented one."""
    for c in s.stuck():
        if not isinstance(c, RowEq):
            continue
        a, b = s.subst_row(c.a), s.subst_row(c.b)
        if a.var is None or b.var is None or a.var == b.var:
            continue
        longer = a if a.known_len >= b.known_len else b
        assert longer.var is not None
        s.bind_row(longer.var, Row.closed(()), o)
        return True
    return False


def _close_leaf_rows_empty(s: SolverState, leaf_rows: list[int], rows: RowOccs, o: Origin) -> None:
    """Leaf rows nothing bounds get no more axes; a parameter's output row must get some."""
    for v in leaf_rows:
        for sh, kind_ix in rows[v]:
            if (sh.is_param and kind_ix == 1
                    and s.subst_row(sh.raw_rows()[1]).known_len == 0):
                raise ShapeError(f"parameter '{sh.label}': its output dims are not "
                                 "determined by any use; pass output_dims",
                                 getattr(sh, "span", None))
        s.bind_row(RowVar(v), Row.closed(()), o)


def _close_dims(s: SolverState, bounds: Bounds, dims: DimOccs, leaf_dims: set[int],
                o: Origin) -> bool:
    at_least = bounds.at_least
    # before interiors close to 1: a parameter's dim that nothing bounds, neither itself
    # nor an interior dim above it (an einsum label over it: label >= the operand's axis)
    # (a size-1 axis computed from size-1 axes bounds what is above it as data of size 1
    # does: everything above a bounded dim counts as bounded, issue 21; so does a dim
    # above an affine dim whose variables are bounded)
    used = bounds.bounded(at_least.keys() | one_bounded_ids(s))
    _check_params(dims, [v for v in sorted(leaf_dims)
                         if v in bounds.under_label and not bounds.reaches(v, used)])
    if _unit_excluded(s, bounds, o):
        return True
    interior_dims = sorted(set(dims) - leaf_dims)
    if interior_dims:
        # a dim a fixed index bounds from below closes to its least upper bound (seed
        # 002; v <= n means v is 1 or n), in strata so that a bound above is solved before
        # the dims below it read it: those whose LUB is known, then those a fixed index
        # needs more than 1 of (to their LUB-less minimum); the rest go down to 1
        lubs = {v: d for v in interior_dims if v in at_least
                and (d := bounds.lub_dim(v)) is not None}
        if not lubs:  # also above them: a use never evaluated still bounds them
            lubs = {w: Dim(k) for w in bounds.above(interior_dims)
                    if (k := at_least.get(w, 1)) > 1}
        for v in sorted(lubs) or interior_dims:
            s.bind_dim(DimVar(v), lubs.get(v) or bounds.unit(v), o)
        return True
    # a dim below a label that a size-1 operand bounds closes to 1 with it
    _check_params(dims, [v for v in sorted(leaf_dims) if not bounds.reaches(v, used)])
    for v in sorted(dims):
        s.bind_dim(DimVar(v), bounds.unit(v, at_least.get(v, 1)), o)
    return bool(dims)


def _unit_excluded(s: SolverState, bounds: Bounds, o: Origin) -> bool:
    """Before any dim is guessed: `v >= w` where a fixed index needs more than one
    position of `w` means `w` cannot be the broadcasting 1, so `v == w` (seed 002: a
    variable closes to its bounds before it is guessed; guessing `v` to 1 first would
    contradict `w`). Returns whether it bound anything."""
    for w, n in sorted(bounds.at_least.items()):
        if n <= 1:
            continue
        for cur in bounds.dims_above.get(w, ()):
            if isinstance(cur, DimVar) and cur.id != w:
                s.bind_dim(cur, DimVar(w), o)
                return True
    return False


def _check_param_broadcast(bounds: Bounds, dims: DimOccs, v: int) -> None:
    """A parameter's dim that uses of different sizes bound (a layer applied to inputs of 3
    and of 8 features) is a ShapeError. The broadcast order (seed 002) would close it to 1,
    the one size under both, and the layer would silently sum its inputs' features with
    one shared weight; a parameter is never meant to broadcast between its uses."""
    sizes = bounds.conflicting_sizes(v)
    params = [sh for sh in dims[v] if sh.is_param] if sizes else []
    if params:
        raise ShapeError(f"parameter '{params[0].label}': one of its dimensions is used with "
                         f"sizes {' and '.join(map(str, sizes))} (a layer applied to inputs of "
                         "different sizes?); use one layer per input size, or pass the "
                         "parameter's dims", getattr(params[0], "span", None))


def _check_params(dims: DimOccs, undetermined: list[int]) -> None:
    """A parameter's dim among `undetermined` is a ShapeError naming the parameter."""
    for v in undetermined:
        params = [sh for sh in dims[v] if sh.is_param]
        if params:
            raise ShapeError(f"parameter '{params[0].label}': a dimension is not "
                             "determined by any use; pass its dims explicitly",
                             getattr(params[0], "span", None))
