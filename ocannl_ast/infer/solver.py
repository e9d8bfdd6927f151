"""Shape constraint solver (seed 002): unification of equalities, simplification of broadcast
inequalities with a watch list, Total_elems, and closing (leaves up, interiors down).

Input: constraints from `infer.shape_logic`. Output: substitutions read through
`subst_dim`/`subst_row`; after `close`, every variable of the closed shapes is solved.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from ..errors import ShapeError
from .constraints import (
    Constraint,
    DimAtLeast,
    DimEq,
    DimIneq,
    Origin,
    RowEq,
    RowIneq,
    TotalElems,
)
from .rank_cycles import rank_cycle
from .terms import (
    AffineDim,
    ConvPart,
    Dim,
    DimTerm,
    DimVar,
    Row,
    RowVar,
    dim_size,
    kernel_span,
    show_dim,
)

MAX_RANK = 64  #: a row longer than this means a row-rank cycle
MAX_STEPS = 1_000_000  #: a safety net against non-termination (per `add` / `close`)
_MISSING = object()


class ClosableShape(Protocol):
    """What closing needs to know about a tensor's shape."""

    label: str
    is_param: bool
    is_terminal: bool

    def raw_rows(self) -> tuple[Row, Row, Row]:
        """batch, output, input rows as terms (unsubstituted is fine)."""
        ...


def _conflict(origin: Origin, fact: str) -> ShapeError:
    return ShapeError(f"{origin.describe()}: {fact}", origin.span)


def _labels_clash(a: Dim, b: Dim) -> bool:
    return a.label is not None and b.label is not None and a.label != b.label


class Solver:
    """One global environment of dim/row variables and the constraints still pending."""

    def __init__(self) -> None:
        self._next_id = 0
        self.dims: dict[int, DimTerm] = {}
        self.rows: dict[int, Row] = {}
        self._queue: deque[Constraint] = deque()
        self._stuck: dict[int, Constraint] = {}
        self._watch: dict[tuple[str, int], frozenset[int]] = {}
        self._next_cid = 0
        #: dims bounded from below by a size-1 axis only (`d >= 1`): no other bound closes
        #: them to 1 (seed 002), where an unconstrained parameter dim is an error
        self._one_bounded: dict[int, DimVar] = {}
        self._steps = 0
        #: undo log of the running `add` / `close`: a failed call leaves no trace
        self._trail: list[tuple[dict[Any, Any], Any, Any]] | None = None

    # ---- transactions ----------------------------------------------------------------

    def _put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        if self._trail is not None:
            self._trail.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def _take(self, table: dict[Any, Any], key: Any) -> Any:
        if key not in table:
            return None
        if self._trail is not None:
            self._trail.append((table, key, table[key]))
        return table.pop(key)

    def _atomically(self, fn: Callable[[], None]) -> None:
        """Run `fn`; if it raises, undo every change it made (a failed operation must not
        poison the shared solver with its half-processed constraints)."""
        if self._trail is not None:
            fn()
            return
        self._trail = []
        self._steps = 0
        try:
            fn()
        except BaseException:
            self._queue.clear()
            for table, key, old in reversed(self._trail):
                if old is _MISSING:
                    table.pop(key, None)
                else:
                    table[key] = old
            raise
        finally:
            self._trail = None

    # ---- variables and substitution ------------------------------------------------

    def fresh_dim(self, name: str | None = None) -> DimVar:
        self._next_id += 1
        return DimVar(self._next_id, name)

    def fresh_row(self) -> RowVar:
        self._next_id += 1
        return RowVar(self._next_id)

    def subst_dim(self, d: DimTerm) -> DimTerm:
        """Resolve solved variables; an affine dim with known parts becomes its size."""
        match d:
            case Dim():
                return d
            case DimVar(id=i):
                if i not in self.dims:
                    return d
                r = self.subst_dim(self.dims[i])
                if r != self.dims[i]:
                    self._put(self.dims, i, r)
                return r
            case AffineDim(stride=st, over=over, offset=off, conv=conv):
                over2 = self.subst_dim(over)
                conv2 = None
                if conv is not None:
                    conv2 = ConvPart(conv.dilation, self.subst_dim(conv.kernel), conv.use_padding)
                a = AffineDim(st, over2, off, conv2)
                size = dim_size(a)
                return Dim(size) if size is not None else a
            case _:
                raise AssertionError(d)

    def subst_row(self, r: Row) -> Row:
        beg, var, dims = r.beg, r.var, r.dims
        while var is not None and var.id in self.rows:
            inner = self.rows[var.id]
            beg, var, dims = beg + inner.beg, inner.var, inner.dims + dims
        if var is None:
            beg, dims = (), beg + dims
        return Row(
            tuple(self.subst_dim(d) for d in beg), var, tuple(self.subst_dim(d) for d in dims)
        )

    # ---- the worklist --------------------------------------------------------------

    def add(self, constraints: Iterable[Constraint]) -> None:
        """Add constraints and propagate to a fixpoint (raises ShapeError on conflict, and
        then leaves the solver as it was before the call)."""
        cs = list(constraints)

        def go() -> None:
            self._queue.extend(cs)
            self.run()

        try:
            self._atomically(go)
        except ShapeError as e:
            _note_added_by(e, cs)
            raise

    def run(self) -> None:
        while self._queue:
            self._steps += 1
            if self._steps > MAX_STEPS:
                raise ShapeError("shape inference did not terminate (constraint cycle)")
            c = self._queue.popleft()
            if not self._process(c):
                self._stash(c)

    def _stash(self, c: Constraint) -> None:
        cid = self._next_cid
        self._next_cid += 1
        self._put(self._stuck, cid, c)
        for key in self._vars_of(c):
            self._put(self._watch, key, self._watch.get(key, frozenset()) | {cid})

    def _wake(self, key: tuple[str, int]) -> None:
        for cid in sorted(self._take(self._watch, key) or ()):
            c = self._take(self._stuck, cid)
            if c is not None:
                self._queue.append(c)

    def _vars_of(self, c: Constraint) -> set[tuple[str, int]]:
        out: set[tuple[str, int]] = set()
        match c:
            case DimEq(a=a, b=b) | DimIneq(cur=a, subr=b):
                _dim_vars(self.subst_dim(a), out)
                _dim_vars(self.subst_dim(b), out)
            case RowEq(a=a, b=b) | RowIneq(cur=a, subr=b):
                _row_vars(self.subst_row(a), out)
                _row_vars(self.subst_row(b), out)
            case TotalElems(row=r):
                _row_vars(self.subst_row(r), out)
            case DimAtLeast(d=d):
                _dim_vars(self.subst_dim(d), out)
            case _:
                raise AssertionError(c)
        return out

    def stuck(self) -> list[Constraint]:
        return list(self._stuck.values())

    # ---- binding -------------------------------------------------------------------

    def _bind_dim(self, v: DimVar, t: DimTerm, origin: Origin) -> None:
        if isinstance(t, DimVar) and t.id == v.id:
            return
        occ: set[tuple[str, int]] = set()
        _dim_vars(t, occ)
        if ("d", v.id) in occ:
            raise _conflict(origin, f"dimension {show_dim(v)} would contain itself")
        self._put(self.dims, v.id, t)
        self._wake(("d", v.id))

    def _bind_row(self, v: RowVar, r: Row, origin: Origin) -> None:
        if r.var is not None and r.var.id == v.id:
            if r.known_len == 0:
                return
            raise _conflict(origin, "row-rank cycle: a row would contain itself plus more axes")
        if r.known_len > MAX_RANK:
            raise _conflict(origin, f"row-rank cycle: a row grew beyond {MAX_RANK} axes")
        self._put(self.rows, v.id, r)
        self._wake(("r", v.id))

    # ---- processing one constraint -------------------------------------------------

    def _process(self, c: Constraint) -> bool:
        """Handle one constraint; False means it is stuck and waits for its variables."""
        match c:
            case DimEq(a=a, b=b, origin=o):
                return self._dim_eq(self.subst_dim(a), self.subst_dim(b), o)
            case DimIneq(cur=a, subr=b, origin=o):
                return self._dim_ineq(self.subst_dim(a), self.subst_dim(b), o)
            case RowEq(a=a, b=b, origin=o):
                self._row_eq(self._rank_checked(a, o), self._rank_checked(b, o), o)
                return True
            case RowIneq(cur=a, subr=b, origin=o):
                return self._row_ineq(self._rank_checked(a, o), self._rank_checked(b, o), o)
            case TotalElems(row=r, n=n, origin=o):
                return self._total_elems(self.subst_row(r), n, o)
            case DimAtLeast(d=d, n=n, origin=o):
                return self._dim_at_least(self.subst_dim(d), n, o)
            case _:
                raise AssertionError(c)

    def _rank_checked(self, r: Row, o: Origin) -> Row:
        """The substituted row; one longer than MAX_RANK can only come from a row-rank cycle
        (rows that must each have more axes than the other), which would grow forever."""
        r = self.subst_row(r)
        if r.known_len > MAX_RANK:
            raise _conflict(o, f"row-rank cycle: a row grew beyond {MAX_RANK} axes")
        return r

    def _dim_at_least(self, d: DimTerm, n: int, o: Origin) -> bool:
        """A fixed index `n - 1` reads or writes this axis: it needs at least n positions."""
        if isinstance(d, DimVar):
            return False
        size = dim_size(d)
        if size is None:
            return True  # an affine dim: its size is checked by the projections
        if size < n:
            raise _conflict(o, f"fixed index {n - 1} is out of range for dimension {size}")
        return True

    def _dim_eq(self, a: DimTerm, b: DimTerm, o: Origin) -> bool:
        if a == b:
            return True
        if isinstance(a, DimVar):
            self._bind_dim(a, b, o)
            return True
        if isinstance(b, DimVar):
            self._bind_dim(b, a, o)
            return True
        if isinstance(a, Dim) and isinstance(b, Dim):
            if _labels_clash(a, b):
                raise _conflict(o, f"basis clash: {show_dim(a)} vs {show_dim(b)}")
            if a.size != b.size:
                raise _conflict(o, f"dimension mismatch: {a.size} vs {b.size}")
            return True
        if isinstance(a, AffineDim) and isinstance(b, Dim):
            return self._affine_eq(a, b.size, o)
        if isinstance(b, AffineDim) and isinstance(a, Dim):
            return self._affine_eq(b, a.size, o)
        assert isinstance(a, AffineDim) and isinstance(b, AffineDim)
        if (a.stride, a.conv is None) == (b.stride, b.conv is None) and a.conv is None:
            self._queue.append(DimEq(a.over, b.over, o))
            return True
        return False

    def _affine_eq(self, a: AffineDim, size: int, o: Origin) -> bool:
        if a.conv is None or a.conv.use_padding:
            if size % a.stride:
                raise _conflict(o, f"size {size} is not a multiple of the stride {a.stride}")
            self._queue.append(DimEq(a.over, Dim(size // a.stride), o))
            return True
        k = dim_size(a.conv.kernel)
        if k is None:
            return False
        span = kernel_span(k, a.conv.dilation)
        rest = size - a.offset - span
        if rest < 0 or rest % a.stride:
            raise _conflict(o, f"axis size {size} does not fit the affine index "
                            f"{show_dim(a)}: it needs {a.stride}*(o-1) + offset {a.offset} + "
                            f"kernel span {span} == {size} for a whole number of outputs o >= 1")
        self._queue.append(DimEq(a.over, Dim(rest // a.stride + 1), o))
        return True

    def _dim_ineq(self, cur: DimTerm, subr: DimTerm, o: Origin) -> bool:
        if isinstance(subr, Dim) and subr.size == 1 and isinstance(cur, DimVar):
            self._put(self._one_bounded, cur.id, cur)
            return True
        if isinstance(subr, Dim) and subr.size == 1 or cur == subr:
            return True
        if isinstance(cur, Dim) and isinstance(subr, Dim):
            if _labels_clash(cur, subr):
                raise _conflict(o, f"basis clash: {show_dim(cur)} vs {show_dim(subr)}")
            if cur.size != subr.size:
                raise _conflict(o, f"cannot broadcast dimension {subr.size} to {cur.size}")
            return True
        if isinstance(cur, Dim):
            if cur.size == 1:
                self._queue.append(DimEq(subr, cur, o))
                return True
            return False
        if isinstance(subr, Dim):
            self._queue.append(DimEq(cur, subr, o))
            return True
        return False

    def _row_eq(self, a: Row, b: Row, o: Origin) -> None:
        if a.var is None and b.var is None:
            if len(a.dims) != len(b.dims):
                raise _conflict(o, f"rank mismatch: {len(a.dims)} vs {len(b.dims)} axes")
            self._queue.extend(DimEq(x, y, o) for x, y in zip(a.dims, b.dims, strict=True))
            return
        if a.var is None:
            a, b = b, a
        if b.var is None:
            assert a.var is not None
            self._row_eq_closed(a, a.var, b.dims, o)
            return
        self._row_eq_open(a, b, o)

    def _row_eq_closed(self, a: Row, var: RowVar, dims: tuple[DimTerm, ...], o: Origin) -> None:
        nb, ne = len(a.beg), len(a.dims)
        if len(dims) < nb + ne:
            raise _conflict(o, f"rank mismatch: at least {nb + ne} axes vs {len(dims)}")
        self._queue.extend(DimEq(x, y, o) for x, y in zip(a.beg, dims[:nb], strict=True))
        tail = dims[len(dims) - ne:]
        self._queue.extend(DimEq(x, y, o) for x, y in zip(a.dims, tail, strict=True))
        self._bind_row(var, Row.closed(dims[nb:len(dims) - ne]), o)

    def _row_eq_open(self, a: Row, b: Row, o: Origin) -> None:
        assert a.var is not None and b.var is not None
        nb = min(len(a.beg), len(b.beg))
        ne = min(len(a.dims), len(b.dims))
        self._queue.extend(DimEq(x, y, o) for x, y in zip(a.beg[:nb], b.beg[:nb], strict=True))
        if ne:
            self._queue.extend(
                DimEq(x, y, o) for x, y in zip(a.dims[-ne:], b.dims[-ne:], strict=True))
        eb1, eb2 = a.beg[nb:], b.beg[nb:]
        ed1, ed2 = a.dims[:len(a.dims) - ne], b.dims[:len(b.dims) - ne]
        if a.var.id == b.var.id:
            if eb1 or eb2 or ed1 or ed2:
                raise _conflict(o, "row-rank cycle: a row equated with itself plus more axes")
            return
        if not (eb1 or eb2 or ed1 or ed2):
            self._bind_row(a.var, Row.open(b.var), o)
            return
        w = self.fresh_row()
        self._bind_row(a.var, Row.open(w, eb2, ed2), o)
        self._bind_row(b.var, Row.open(w, eb1, ed1), o)

    def _row_ineq(self, cur: Row, subr: Row, o: Origin) -> bool:
        need = subr.known_len
        if cur.var is None and len(cur.dims) < need:
            raise _conflict(o, f"cannot broadcast {need} axes into {len(cur.dims)} axes")
        if cur.var is not None and cur.known_len < need:
            self._check_rank_cycle(RowIneq(cur, subr, o), cur, subr)
            extra = tuple(self.fresh_dim() for _ in range(need - cur.known_len))
            self._bind_row(cur.var, Row.open(self.fresh_row(), (), extra), o)
            self._queue.append(RowIneq(cur, subr, o))
            return True
        k = min(len(cur.dims), len(subr.dims))
        for j in range(1, k + 1):
            self._queue.append(DimIneq(cur.dims[-j], subr.dims[-j], o))
        rest_cur = Row(cur.beg, cur.var, cur.dims[:len(cur.dims) - k])
        rest_sub = Row(subr.beg, subr.var, subr.dims[:len(subr.dims) - k])
        if rest_sub.var is None and not rest_sub.dims:
            return True
        if rest_sub.var is not None and rest_cur.var == rest_sub.var and rest_sub.known_len == 0:
            return True
        if k == 0:
            return False
        self._stash(RowIneq(rest_cur, rest_sub, o))
        return True

    def _check_rank_cycle(self, c: RowIneq, cur: Row, subr: Row) -> None:
        """Before growing `cur` to fit `subr`: a ShapeError naming the inequalities if they
        and pending ones ask a row for more axes than itself (growing would never end)."""
        if subr.var is None:
            return
        pending = [(p, self.subst_row(p.cur), self.subst_row(p.subr))
                   for p in (*self._stuck.values(), *self._queue) if isinstance(p, RowIneq)]
        cycle = rank_cycle((c, cur, subr), pending)
        if cycle is None:
            return
        steps = "\n".join(f"  - {x.origin.describe()}"
                          + (f" at {x.origin.span}" if x.origin.span else "") for x in cycle)
        raise _conflict(c.origin, f"row-rank cycle: these {len(cycle)} broadcasts each need a "
                        f"row with more axes than the next, around a cycle:\n{steps}")

    def _total_elems(self, row: Row, n: int, o: Origin) -> bool:
        if row.var is not None:
            return False
        prod, unknown = 1, []
        for d in row.dims:
            s = dim_size(d)
            if s is None:
                unknown.append(d)
            else:
                prod *= s
        if not unknown:
            if prod != n:
                raise _conflict(o, f"row has {prod} elements, expected {n}")
            return True
        if len(unknown) == 1 and isinstance(unknown[0], DimVar):
            if prod == 0 or n % prod:
                raise _conflict(o, f"{n} elements do not divide into axes of product {prod}")
            self._bind_dim(unknown[0], Dim(n // prod), o)
            return True
        return False

    # ---- closing -------------------------------------------------------------------

    def close(self, shapes: Iterable[ClosableShape]) -> None:
        """Solve every variable of these shapes: leaves upward to their least upper bounds,
        interiors down to dimension 1 / no more axes (seed 002). A parameter whose dims
        nothing determines is a ShapeError naming it."""
        shapes = list(shapes)

        def go() -> None:
            for _ in range(10_000):
                self.run()
                rows, dims = self._unsolved(shapes)
                if not rows and not dims:
                    return
                if not self._close_step(shapes, rows, dims):
                    raise ShapeError("internal: closing made no progress")
            raise ShapeError("shape closing did not terminate")

        self._atomically(go)

    def _unsolved(
        self, shapes: list[ClosableShape]
    ) -> tuple[dict[int, list[tuple[ClosableShape, int]]], dict[int, list[ClosableShape]]]:
        rows: dict[int, list[tuple[ClosableShape, int]]] = {}
        dims: dict[int, list[ClosableShape]] = {}
        for sh in shapes:
            for kind_ix, r in enumerate(sh.raw_rows()):
                r = self.subst_row(r)
                if r.var is not None:
                    rows.setdefault(r.var.id, []).append((sh, kind_ix))
                keys: set[tuple[str, int]] = set()
                for d in r.beg + r.dims:
                    _dim_vars(d, keys)
                for _, i in keys:
                    dims.setdefault(i, []).append(sh)
        return rows, dims

    def _close_step(self, shapes: list[ClosableShape],
                    rows: dict[int, list[tuple[ClosableShape, int]]],
                    dims: dict[int, list[ClosableShape]]) -> bool:
        o = Origin("closing shapes")
        leaf_rows = {v for v, occ in rows.items() if any(s.is_terminal for s, _ in occ)}
        leaf_dims = {v for v, occ in dims.items() if any(s.is_terminal for s in occ)}
        param_out = {v for v, occ in rows.items() if any(s.is_param and k == 1 for s, k in occ)}
        row_lubs = {v: n for v in leaf_rows if (n := self._row_lub_len(v)) is not None
                    and (n > 0 or v not in param_out)}
        if row_lubs:
            for v, n in sorted(row_lubs.items()):
                fresh = tuple(self.fresh_dim() for _ in range(n))
                self._bind_row(RowVar(v), Row.closed(fresh), o)
            return True
        dim_lubs = {v: n for v in leaf_dims if (n := self._dim_lub(v, set())) is not None}
        if dim_lubs:
            for v, n in sorted(dim_lubs.items()):
                self._bind_dim(DimVar(v), Dim(n), o)
            return True
        interior_rows = sorted(set(rows) - leaf_rows)
        if interior_rows:
            for v in interior_rows:
                self._bind_row(RowVar(v), Row.closed(()), o)
            return True
        if leaf_rows:
            for v in sorted(leaf_rows):
                for sh, kind_ix in rows[v]:
                    if (sh.is_param and kind_ix == 1
                            and self.subst_row(sh.raw_rows()[1]).known_len == 0):
                        raise ShapeError(f"parameter '{sh.label}': its output dims are not "
                                         "determined by any use; pass output_dims",
                                         getattr(sh, "span", None))
                self._bind_row(RowVar(v), Row.closed(()), o)
            return True
        at_least = self._at_least_bounds()
        interior_dims = sorted(set(dims) - leaf_dims)
        if interior_dims:
            for v in interior_dims:
                # v <= n means v is 1 or n; a fixed index needing more than 1 forces n
                n = self._dim_lub(v, set()) if at_least.get(v, 1) > 1 else None
                self._bind_dim(DimVar(v), Dim(n if n is not None else at_least.get(v, 1)), o)
            return True
        used = at_least.keys() | self._one_bounded_ids()
        for v in sorted(leaf_dims):
            params = [s for s in dims[v] if s.is_param]
            if params and v not in used:
                raise ShapeError(f"parameter '{params[0].label}': a dimension is not "
                                 "determined by any use; pass its dims explicitly",
                                 getattr(params[0], "span", None))
        for v in sorted(dims):
            self._bind_dim(DimVar(v), Dim(at_least.get(v, 1)), o)
        return bool(dims)

    def _one_bounded_ids(self) -> set[int]:
        """Unsolved dim variables some use bounds by a size-1 axis: they close to 1."""
        out: set[int] = set()
        for v in self._one_bounded.values():
            d = self.subst_dim(v)
            if isinstance(d, DimVar):
                out.add(d.id)
        return out

    def _at_least_bounds(self) -> dict[int, int]:
        """Unsolved dim variables read or written at a fixed index: the size they need."""
        out: dict[int, int] = {}
        for c in self._stuck.values():
            if isinstance(c, DimAtLeast):
                d = self.subst_dim(c.d)
                if isinstance(d, DimVar):
                    out[d.id] = max(out.get(d.id, 1), c.n)
        return out

    def _row_lub_len(self, v: int, seen: frozenset[int] = frozenset()) -> int | None:
        """How many axes a leaf row variable takes when closed upward: the fewest its upper
        bounds allow, through chains of open rows (their known axes count; a row with none
        and nothing above it sets no bound)."""
        best: int | None = None
        for c in list(self._stuck.values()):
            if not isinstance(c, RowIneq):
                continue
            sub = self.subst_row(c.subr)
            if sub.var is None or sub.var.id != v:
                continue
            cur = self.subst_row(c.cur)
            if cur.var is None:
                n = len(cur.dims)
            elif cur.var.id in seen or cur.var.id == v:
                continue
            else:
                up = self._row_lub_len(cur.var.id, seen | {v})
                if up is None and cur.known_len == 0:
                    continue  # an unbounded row above: it will grow to fit, no bound here
                n = cur.known_len + (up or 0)
            n -= sub.known_len
            best = n if best is None else min(best, n)
        return None if best is None else max(best, 0)

    def _dim_lub(self, v: int, seen: set[int]) -> int | None:
        """Least upper bound of a dim variable: the dims > 1 reachable upward through the
        inequalities (v <= w <= 3); two different ones collapse it to 1. Collected over
        the whole upward graph, so the answer does not depend on the order of the
        constraints (a visited variable must not hide a bound reachable another way)."""
        found: set[int] = set()
        seen.add(v)
        todo = [v]
        while todo:
            x = todo.pop()
            for c in self._stuck.values():
                if not isinstance(c, DimIneq):
                    continue
                sub = self.subst_dim(c.subr)
                if not (isinstance(sub, DimVar) and sub.id == x):
                    continue
                cur = self.subst_dim(c.cur)
                if isinstance(cur, Dim) and cur.size > 1:
                    found.add(cur.size)
                elif isinstance(cur, DimVar) and cur.id not in seen:
                    seen.add(cur.id)
                    todo.append(cur.id)
        if not found:
            return None
        return found.pop() if len(found) == 1 else 1


def _note_added_by(e: ShapeError, cs: list[Constraint]) -> None:
    """A conflict found in an earlier operation's pending constraint was triggered by the
    operation being added now: name that one too, so the message shows both lines."""
    span = next((c.origin.span for c in cs if c.origin.span is not None), None)
    if span is None or e.span is None or (span.file, span.line) == (e.span.file, e.span.line):
        return
    op = next(c.origin.op for c in cs if c.origin.span is span)
    e.message += f"\n  found while adding operation '{op}' at {span}"
    e.args = (e._render(),)


def _dim_vars(d: DimTerm, out: set[tuple[str, int]]) -> None:
    match d:
        case Dim():
            pass
        case DimVar(id=i):
            out.add(("d", i))
        case AffineDim(over=over, conv=conv):
            _dim_vars(over, out)
            if conv is not None:
                _dim_vars(conv.kernel, out)
        case _:
            raise AssertionError(d)


def _row_vars(r: Row, out: set[tuple[str, int]]) -> None:
    if r.var is not None:
        out.add(("r", r.var.id))
    for d in r.beg + r.dims:
        _dim_vars(d, out)
