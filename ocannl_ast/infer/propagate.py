"""Constraint propagation rules (seed 002): one constraint at a time, against the current
substitution of a solver: unify equalities, simplify broadcast inequalities, Total_elems,
fixed-index bounds, and the row-rank cycle check before a row grows.

Input: a constraint popped from `SolverState.queue`. Output: bindings and new constraints in
the solver; False when the constraint is stuck and must wait for its variables.
"""

from __future__ import annotations

from typing import assert_never

from . import elems
from .concat import process_sum
from .constraints import (
    ConcatSum,
    Constraint,
    DimAtLeast,
    DimEq,
    DimIneq,
    Origin,
    RowBcast,
    RowEq,
    RowIneq,
    RowsTotal,
    TotalElems,
    conflict,
)
from .rank_cycles import rank_cycle
from .state import MAX_RANK, SolverState
from .terms import AffineDim, Dim, DimTerm, DimVar, Row, RowVar, dim_size, kernel_span, show_dim


def _labels_clash(a: Dim, b: Dim) -> bool:
    return a.label is not None and b.label is not None and a.label != b.label


def process(s: SolverState, c: Constraint) -> bool:
    """Handle one constraint; False means it is stuck and waits for its variables."""
    if isinstance(c, RowIneq):  # the most frequent first, without the match protocol (hot)
        sub = s.subst_row
        cur, subr = sub(c.cur), sub(c.subr)
        if (len(cur.beg) + len(cur.dims) > MAX_RANK
                or len(subr.beg) + len(subr.dims) > MAX_RANK):
            raise conflict(c.origin, f"row-rank cycle: a row grew beyond {MAX_RANK} axes")
        return _row_ineq(s, cur, subr, c.origin)
    if isinstance(c, DimIneq):
        return _dim_ineq(s, s.subst_dim(c.cur), s.subst_dim(c.subr), c.origin)
    match c:  # the others by frequency
        case DimEq(a=a, b=b, origin=o):
            return _dim_eq(s, s.subst_dim(a), s.subst_dim(b), o)
        case RowEq(a=a, b=b, origin=o):
            return _row_eq(s, _rank_checked(s, a, o), _rank_checked(s, b, o), o)
        case RowBcast(cur=a, subr=b, origin=o):
            return _row_bcast(s, _rank_checked(s, a, o), _rank_checked(s, b, o), o)
        case TotalElems(row=r, n=n, origin=o):
            return _total_elems(s, s.subst_row(r), n, o)
        case DimAtLeast(d=d, n=n, origin=o):
            return _dim_at_least(s.subst_dim(d), n, o)
        case RowsTotal():
            return elems.rows_total(s, c)
        case ConcatSum():
            return process_sum(s, c)
        case _:
            assert_never(c)


def _rank_checked(s: SolverState, r: Row, o: Origin) -> Row:
    """The substituted row; one longer than MAX_RANK can only come from a row-rank cycle
    (rows that must each have more axes than the other), which would grow forever."""
    r = s.subst_row(r)
    if len(r.beg) + len(r.dims) > MAX_RANK:  # (`known_len`, inlined: hot)
        raise conflict(o, f"row-rank cycle: a row grew beyond {MAX_RANK} axes")
    return r


def _dim_at_least(d: DimTerm, n: int, o: Origin) -> bool:
    """A fixed index `n - 1` reads or writes this axis: it needs at least n positions."""
    if isinstance(d, DimVar):
        return False
    size = dim_size(d)
    if size is None:
        return True  # an affine dim: its size is checked by the projections
    if size < n:
        raise conflict(o, f"fixed index {n - 1} is out of range for dimension {size}")
    return True


def _dim_eq(s: SolverState, a: DimTerm, b: DimTerm, o: Origin) -> bool:
    if a == b:
        return True
    if isinstance(a, DimVar):
        s.bind_dim(a, b, o)
        return True
    if isinstance(b, DimVar):
        s.bind_dim(b, a, o)
        return True
    if isinstance(a, Dim) and isinstance(b, Dim):
        if _labels_clash(a, b):
            raise conflict(o, f"basis clash: {show_dim(a)} vs {show_dim(b)}")
        if a.size != b.size:
            raise conflict(o, f"dimension mismatch: {a.size} vs {b.size}")
        return True
    if isinstance(a, AffineDim) and isinstance(b, Dim):
        return _affine_eq(s, a, b.size, o)
    if isinstance(b, AffineDim) and isinstance(a, Dim):
        return _affine_eq(s, b, a.size, o)
    assert isinstance(a, AffineDim) and isinstance(b, AffineDim)
    if (a.stride, a.conv is None) == (b.stride, b.conv is None) and a.conv is None:
        s.queue.append(DimEq(a.over, b.over, o))
        return True
    return False


def _affine_eq(s: SolverState, a: AffineDim, size: int, o: Origin) -> bool:
    if a.conv is None or a.conv.use_padding:
        if size % a.stride:
            raise conflict(o, f"size {size} is not a multiple of the stride {a.stride}")
        s.queue.append(DimEq(a.over, Dim(size // a.stride), o))
        return True
    k = dim_size(a.conv.kernel)
    if k is None:
        return False
    span = kernel_span(k, a.conv.dilation)
    rest = size - a.offset - span
    if rest < 0 or rest % a.stride:
        raise conflict(o, f"axis size {size} does not fit the affine index "
                       f"{show_dim(a)}: it needs {a.stride}*(o-1) + offset {a.offset} + "
                       f"kernel span {span} == {size} for a whole number of outputs o >= 1")
    s.queue.append(DimEq(a.over, Dim(rest // a.stride + 1), o))
    return True


def _dim_ineq(s: SolverState, cur: DimTerm, subr: DimTerm, o: Origin) -> bool:
    if isinstance(subr, Dim) and subr.size == 1 and isinstance(cur, DimVar):
        s.put(s.one_bounded, cur.id, cur)
        if subr.label is not None:  # two different bases below: none to keep (None)
            seen = s.unit_basis.get(cur.id)
            lbl = subr.label if seen is None or seen[1] == subr.label else None
            s.put(s.unit_basis, cur.id, (cur, lbl))
        return True
    if isinstance(subr, Dim) and subr.size == 1 or cur == subr:
        return True
    if isinstance(cur, Dim) and isinstance(subr, Dim):
        if _labels_clash(cur, subr):
            raise conflict(o, f"basis clash: {show_dim(cur)} vs {show_dim(subr)}")
        if cur.size != subr.size:
            raise conflict(o, f"cannot broadcast dimension {subr.size} to {cur.size}")
        return True
    if isinstance(cur, Dim):
        if cur.size == 1:
            s.queue.append(DimEq(subr, cur, o))
            return True
        return False
    if isinstance(subr, Dim):
        s.queue.append(DimEq(cur, subr, o))
        return True
    return False


def _row_eq(s: SolverState, a: Row, b: Row, o: Origin) -> bool:
    """False (stuck) only for two open rows whose alignment is ambiguous (see
    `_row_eq_open`)."""
    if a.var is None and b.var is None:
        if len(a.dims) != len(b.dims):
            raise conflict(o, f"rank mismatch: {len(a.dims)} vs {len(b.dims)} axes")
        s.queue.extend(DimEq(x, y, o) for x, y in zip(a.dims, b.dims, strict=True))
        return True
    if a.var is None:
        a, b = b, a
    if b.var is None:
        assert a.var is not None
        _row_eq_closed(s, a, a.var, b.dims, o)
        return True
    return _row_eq_open(s, a, b, o)


def _row_eq_closed(s: SolverState, a: Row, var: RowVar, dims: tuple[DimTerm, ...],
                   o: Origin) -> None:
    nb, ne = len(a.beg), len(a.dims)
    if len(dims) < nb + ne:
        raise conflict(o, f"rank mismatch: at least {nb + ne} axes vs {len(dims)}")
    s.queue.extend(DimEq(x, y, o) for x, y in zip(a.beg, dims[:nb], strict=True))
    tail = dims[len(dims) - ne:]
    s.queue.extend(DimEq(x, y, o) for x, y in zip(a.dims, tail, strict=True))
    s.bind_row(var, Row.closed(dims[nb:len(dims) - ne]), o)


def _row_eq_open(s: SolverState, a: Row, b: Row, o: Origin) -> bool:
    """Two open rows. When one has axes left of its row variable that the other's
    variable would have to hold while the other has axes right of it the first's would
    hold (`h ++ ..c..` vs `..r.. ++ 3,4,2`), how the two overlap is not known: `h` may be
    the first of `3,4,2` or an axis of its own. Splitting a row variable to make room
    would invent an axis, so the equation waits (stuck) until a row variable is bound;
    closing binds the one whose row has more known axes to no more axes (seed 002's
    closing, `ambiguous_row_eqs`)."""
    assert a.var is not None and b.var is not None
    nb = min(len(a.beg), len(b.beg))
    ne = min(len(a.dims), len(b.dims))
    s.queue.extend(DimEq(x, y, o) for x, y in zip(a.beg[:nb], b.beg[:nb], strict=True))
    if ne:
        s.queue.extend(DimEq(x, y, o) for x, y in zip(a.dims[-ne:], b.dims[-ne:], strict=True))
    eb1, eb2 = a.beg[nb:], b.beg[nb:]
    ed1, ed2 = a.dims[:len(a.dims) - ne], b.dims[:len(b.dims) - ne]
    if a.var.id == b.var.id:
        if eb1 or eb2 or ed1 or ed2:
            raise conflict(o, "row-rank cycle: a row equated with itself plus more axes")
        return True
    if not (eb1 or eb2 or ed1 or ed2):
        s.bind_row(a.var, Row.open(b.var), o)
        return True
    if (eb1 and ed2) or (eb2 and ed1):
        s.stash(RowEq(Row(eb1, a.var, ed1), Row(eb2, b.var, ed2), o))
        return True
    w = s.fresh_row()
    s.bind_row(a.var, Row.open(w, eb2, ed2), o)
    s.bind_row(b.var, Row.open(w, eb1, ed1), o)
    return True


def _row_ineq(s: SolverState, cur: Row, subr: Row, o: Origin) -> bool:
    cd, sd, var, sub_var = cur.dims, subr.dims, cur.var, subr.var  # (hot: locals)
    need = len(subr.beg) + len(sd)
    if var is None and len(cd) < need:
        raise conflict(o, f"cannot broadcast {need} axes into {len(cd)} axes")
    if var is not None and len(cur.beg) + len(cd) < need:
        _check_rank_cycle(s, RowIneq(cur, subr, o), cur, subr)
        extra = tuple(s.fresh_dim() for _ in range(need - cur.known_len))
        s.bind_row(var, Row.open(s.fresh_row(), (), extra), o)
        s.queue.append(RowIneq(cur, subr, o))
        return True
    k = min(len(cd), len(sd))
    queue = s.queue
    for j in range(1, k + 1):
        x, y = cd[-j], sd[-j]
        if x != y:  # equal axes satisfy `x >= y` and bind nothing (`_dim_ineq`)
            queue.append(DimIneq(x, y, o))
    sub_rest = sd[:len(sd) - k]  # what the aligned axes leave of each side
    if sub_var is None and not sub_rest:
        return True
    if sub_var is not None and var == sub_var and not subr.beg and not sub_rest:
        return True
    if k == 0:  # stuck: parked as read now (the solver would read it again)
        s.stash(RowIneq(cur, subr, o), substituted=True)
        return True
    s.stash(RowIneq(Row(cur.beg, var, cd[:len(cd) - k]), Row(subr.beg, sub_var, sub_rest), o),
            substituted=True)
    return True


def _row_bcast(s: SolverState, cur: Row, subr: Row, o: Origin) -> bool:
    """As many axes on both sides, each `cur >= subr`. Two open rows are equated: an
    operand row still unknown when its einsum is built matches the spec's exactly (a
    pending rank equality would hide row-rank cycles from `_check_rank_cycle`)."""
    if cur.var is not None and subr.var is not None:
        if cur.var != subr.var:
            _row_eq(s, cur, subr, o)
            return True
        if (len(cur.beg), len(cur.dims)) != (len(subr.beg), len(subr.dims)):
            raise conflict(o, "row-rank cycle: a row broadcast into itself plus more axes")
        pairs = list(zip(cur.beg + cur.dims, subr.beg + subr.dims, strict=True))
    elif cur.var is None and subr.var is None:
        if len(cur.dims) != len(subr.dims):
            raise conflict(o, f"rank mismatch: {len(cur.dims)} vs {len(subr.dims)} axes")
        pairs = list(zip(cur.dims, subr.dims, strict=True))
    else:
        closed, open_ = (cur, subr) if cur.var is None else (subr, cur)
        assert open_.var is not None
        n = len(closed.dims) - open_.known_len
        if n < 0:
            raise conflict(o, f"rank mismatch: at least {open_.known_len} axes vs "
                           f"{len(closed.dims)}")
        s.bind_row(open_.var, Row.closed(tuple(s.fresh_dim() for _ in range(n))), o)
        s.queue.append(RowBcast(cur, subr, o))
        return True
    s.queue.extend(DimIneq(a, b, o) for a, b in pairs)
    return True


def _check_rank_cycle(s: SolverState, c: RowIneq, cur: Row, subr: Row) -> None:
    """Before growing `cur` to fit `subr`: a ShapeError naming the inequalities if they
    and pending ones ask a row for more axes than itself (growing would never end)."""
    if subr.var is None:
        return
    assert cur.var is not None
    pending = _pending_above(s, cur.var.id, subr.var.id)
    cycle = None if pending is None else rank_cycle((c, cur, subr), pending)
    if cycle is None:
        return
    steps = "\n".join(f"  - {x.origin.describe()}"
                      + (f" at {x.origin.span}" if x.origin.span else "") for x in cycle)
    raise conflict(c.origin, f"row-rank cycle: these {len(cycle)} broadcasts each need a "
                   f"row with more axes than the next, around a cycle:\n{steps}")


Pending = tuple[RowIneq, Row, Row]  #: an inequality with its substituted cur and subr


def _pending_above(s: SolverState, start: int, target: int) -> list[Pending] | None:
    """The pending row inequalities reachable upward from row variable `start` (subr's
    variable to cur's), found through the watch index, in the order of the pending list
    (stuck oldest first, then queued): `rank_cycle` needs no others. None when they do not
    reach row variable `target` (then no cycle runs through `target >= start`)."""
    # queued inequalities whose subr has a row variable, by it; each one's cur is read only
    # when the walk reaches that variable (most are never reached: no read, hot)
    queued: list[tuple[RowIneq, Row]] = []
    queued_from: dict[int, list[int]] = {}
    for p in s.queue:
        if isinstance(p, RowIneq):
            sub = s.subst_row(p.subr)
            if sub.var is not None:
                queued_from.setdefault(sub.var.id, []).append(len(queued))
                queued.append((p, sub))
    curs: dict[int, Row] = {}
    stuck: dict[int, Pending] = {}
    seen, todo = {start}, [start]
    while todo:
        a = todo.pop()
        ups: list[Row] = []
        for i in queued_from.get(a, ()):
            curs[i] = s.subst_row(queued[i][0].cur)
            ups.append(curs[i])
        for cid, p in s.stuck_watching(("r", a)):
            if isinstance(p, RowIneq) and cid not in stuck:
                sub = s.subst_row(p.subr)
                if sub.var is not None and sub.var.id == a:
                    stuck[cid] = (p, s.subst_row(p.cur), sub)
                    ups.append(stuck[cid][1])
        for cur in ups:
            if cur.var is not None and cur.var.id not in seen:
                seen.add(cur.var.id)
                todo.append(cur.var.id)
    if target not in seen:
        return None
    reached = [(p, curs[i], sub) for i, (p, sub) in enumerate(queued)
               if sub.var is not None and sub.var.id in seen]
    return [stuck[k] for k in sorted(stuck)] + reached


def _total_elems(s: SolverState, row: Row, n: int, o: Origin) -> bool:
    if row.var is not None:
        return False
    prod, unknown = 1, []
    for d in row.dims:
        size = dim_size(d)
        if size is None:
            unknown.append(d)
        else:
            prod *= size
    if not unknown:
        if prod != n:
            raise conflict(o, f"row has {prod} elements, expected {n}")
        return True
    if len(unknown) == 1 and isinstance(unknown[0], DimVar):
        if prod == 0 or n % prod:
            raise conflict(o, f"{n} elements do not divide into axes of product {prod}")
        s.bind_dim(unknown[0], Dim(n // prod), o)
        return True
    return False
