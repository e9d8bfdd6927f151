"""Shape solver state (seed 002): the variables, bindings and pending constraints of one
inference component, with the undo log, substitution, binding and the parked constraints.

The constraint rules (`infer.propagate`, `infer.concat`, `infer.elems`), closing
(`infer.closing`) and least upper bounds (`infer.lub`) are typed against `SolverState`;
`infer.solver.Solver` adds the entry points (`add`, `close`) and the worklist driver (`run`).

Input: bindings and constraints from the rules. Output: substitutions (`subst_dim`/`subst_row`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, Self, assert_never

from ..errors import ShapeError
from ..lowering.ids import fresh_id
from .constraints import Constraint, Origin, conflict, constraint_vars
from .terms import (
    AffineDim,
    ConvPart,
    Dim,
    DimTerm,
    DimVar,
    Row,
    RowVar,
    dim_size,
    dim_vars,
    show_dim,
)

MAX_RANK = 64  #: a row longer than this means a row-rank cycle
_MISSING = object()


class SolverState:
    """The environment of one component: dim/row variables and the constraints pending."""

    def __init__(self) -> None:
        self.dims: dict[int, DimTerm] = {}
        self.rows: dict[int, Row] = {}
        self.queue: deque[Constraint] = deque()
        self._stuck: dict[int, Constraint] = {}
        self._watch: dict[tuple[str, int], frozenset[int]] = {}
        #: dims bounded from below by a size-1 axis only (`d >= 1`): no other bound closes
        #: them to 1 (seed 002), where an unconstrained parameter dim is an error
        self.one_bounded: dict[int, DimVar] = {}
        #: the basis of the labelled size-1 axes bounding a dim from below (seeds 000/001:
        #: a dim that closes to 1 against them keeps it; None: they disagree)
        self.unit_basis: dict[int, tuple[DimVar, str | None]] = {}
        self._steps = 0
        #: undo log of the running `add` / `close`: a failed call leaves no trace
        self._trail: list[tuple[dict[Any, Any], Any, Any]] | None = None
        self._owned: set[int] = set()  #: the variable ids of this component
        self._parent: Self | None = None  #: set once merged into another component

    def run(self) -> None:
        """Propagate the queued constraints to a fixpoint (`infer.solver.Solver.run`)."""
        raise NotImplementedError

    # ---- components ----------------------------------------------------------------

    def find(self) -> Self:
        """The solver that now holds this component (itself unless it was merged)."""
        if self._parent is None:  # (the usual case: a component's own solver, hot)
            return self
        root = self
        while root._parent is not None:
            root = root._parent
        s = self
        while s._parent is not None and s._parent is not root:
            s._parent, s = root, s._parent
        return root

    def join(self, *others: Self) -> Self:
        """Merge the components of `self` and `others`; returns the solver holding them."""
        root = self.find()
        for o in others:
            root = root._union(o.find())
        return root

    def _union(self, other: Self) -> Self:
        if other is self:
            return self
        if self._trail is not None or other._trail is not None or self.queue or other.queue:
            raise ShapeError("internal: shape components merged during propagation")
        big, small = (self, other) if len(self._owned) >= len(other._owned) else (other, self)
        # (a new tensor's component holds variables only: its empty tables stay as they are)
        if small.dims or small.rows or small._stuck or small._watch:
            big.dims.update(small.dims)
            big.rows.update(small.rows)
            big._stuck.update(small._stuck)
            for key, cids in small._watch.items():
                big._watch[key] = big._watch.get(key, frozenset()) | cids
            small.dims, small.rows, small._stuck, small._watch = {}, {}, {}, {}
        if small.one_bounded or small.unit_basis:
            big.one_bounded.update(small.one_bounded)
            big.unit_basis.update(small.unit_basis)
            small.one_bounded, small.unit_basis = {}, {}
        big._owned |= small._owned
        small._owned = set()
        small._parent = big
        return big

    def owns(self, var_id: int) -> bool:
        return var_id in self.find()._owned

    def live_size(self) -> int:
        """Bindings plus pending constraints held (a measure of the live state)."""
        root = self.find()
        return len(root.dims) + len(root.rows) + len(root._stuck)

    # ---- transactions ----------------------------------------------------------------

    def put(self, table: dict[Any, Any], key: Any, value: Any) -> None:
        if self._trail is not None:
            self._trail.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def _take(self, table: dict[Any, Any], key: Any) -> Any:
        if key not in table:
            return None
        if self._trail is not None:
            self._trail.append((table, key, table[key]))
        return table.pop(key)

    def in_transaction(self) -> bool:
        """Whether an `atomically` block is running (its changes may still be undone)."""
        return self.find()._trail is not None

    def atomically(self, fn: Callable[[], None]) -> None:
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
            self.queue.clear()
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
        root = self.find()
        v = DimVar(fresh_id(), name)
        root._owned.add(v.id)
        return v

    def fresh_row(self) -> RowVar:
        root = self.find()
        v = RowVar(fresh_id())
        root._owned.add(v.id)
        return v

    def subst_dim(self, d: DimTerm) -> DimTerm:
        """Resolve solved variables; an affine dim with known parts becomes its size."""
        if self._parent is not None:
            return self.find().subst_dim(d)
        if type(d) is DimVar:  # the frequent cases first, without the match (hot)
            b = self.dims.get(d.id)
            if b is None:
                return d
            if type(b) is Dim:
                return b
        match d:
            case Dim():
                return d
            case DimVar(id=i):
                if i not in self.dims:
                    return d
                r = self.subst_dim(self.dims[i])
                if r != self.dims[i]:
                    self.put(self.dims, i, r)
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
                assert_never(d)

    def subst_row(self, r: Row) -> Row:
        if self._parent is not None:
            return self.find().subst_row(r)
        rows = self.rows
        var = r.var
        if var is not None and not r.beg and not r.dims:
            # a bare row variable (most shapes' rows): its binding itself when that is final
            # -- closed or over an unbound variable, every axis a known size (hot: closing)
            bound = rows.get(var.id)
            if bound is None:
                return r
            v2 = bound.var
            if (v2 is None and not bound.beg) or (v2 is not None and v2.id not in rows):
                for d in bound.beg:
                    if type(d) is not Dim:
                        break
                else:
                    for d in bound.dims:
                        if type(d) is not Dim:
                            break
                    else:
                        return bound
        v0: RowVar | None = None
        if var is not None and var.id in rows:
            # what `r.var` stands for, its chain of bound row variables followed; a bare
            # row's resolution is stored back for `v0` (path compression, as `subst_dim`
            # does: the next read takes the fast path above), else a chain of several
            v0, hops = var, 0
            cbeg: tuple[DimTerm, ...] = ()
            cdims: tuple[DimTerm, ...] = ()
            while var is not None and var.id in rows:
                inner = rows[var.id]
                cbeg, var, cdims = cbeg + inner.beg, inner.var, inner.dims + cdims
                hops += 1
            if r.beg or r.dims:
                if hops > 1:
                    self.put(rows, v0.id, Row((), None, cbeg + cdims) if var is None
                             else Row(cbeg, var, cdims))
                v0 = None
            elif hops == 1 and var is None and inner.beg:
                v0 = None  # (a closed binding not in normal form: left as it is)
            beg, dims = r.beg + cbeg, cdims + r.dims
        else:
            beg, dims = r.beg, r.dims
            if var is not None or not beg:  # nothing moves: only variable dims may change
                for d in beg:
                    if type(d) is not Dim:
                        break
                else:
                    for d in dims:
                        if type(d) is not Dim:
                            break
                    else:
                        return r  # every axis a known size (the common case after closing)
        if var is None:
            beg, dims = (), beg + dims
        # a known size stays itself (the common case: no call, and no new row when none moved)
        beg2, dims2 = self._subst_dims(beg), self._subst_dims(dims)
        if v0 is not None:  # `r` is `v0` bare: the result is its binding, resolved
            out = Row(beg2, var, dims2)
            if hops > 1 or beg2 != inner.beg or dims2 != inner.dims:
                self.put(rows, v0.id, out)
            return out
        if var is r.var and beg2 == r.beg and dims2 == r.dims:
            return r
        return Row(beg2, var, dims2)

    def _subst_dims(self, ds: tuple[DimTerm, ...]) -> tuple[DimTerm, ...]:
        """`ds` substituted; itself when every axis is a known size (no copy: hot)."""
        for d in ds:
            if type(d) is not Dim:
                sub = self.subst_dim
                return tuple([d if type(d) is Dim else sub(d) for d in ds])
        return ds

    # ---- pending constraints -------------------------------------------------------

    def stash(self, c: Constraint, *, substituted: bool = False) -> None:
        """Park a constraint until one of its variables is bound (`substituted`: its terms
        are already read through the current bindings)."""
        cid = fresh_id()
        keys: set[tuple[str, int]] = set()
        constraint_vars(c, keys, None if substituted else self)
        stuck, watch, trail, new = self._stuck, self._watch, self._trail, frozenset((cid,))
        if trail is not None:  # (`put`, inlined: hot)
            trail.append((stuck, cid, _MISSING))
        stuck[cid] = c
        for key in keys:
            old = watch.get(key)
            if trail is not None:
                trail.append((watch, key, _MISSING if old is None else old))
            watch[key] = new if old is None else old | new

    def _wake(self, key: tuple[str, int]) -> None:
        cids = self._take(self._watch, key)
        if not cids:
            return
        stuck, queue, take = self._stuck, self.queue, self._take
        for cid in sorted(cids) if len(cids) > 1 else cids:
            c = take(stuck, cid)
            if c is not None:
                queue.append(c)

    def stuck_watching(self, key: tuple[str, int]) -> list[tuple[int, Constraint]]:
        """The pending constraints (with their ids) that mention a variable ("d"/"r", id)."""
        root = self.find()
        return [(cid, root._stuck[cid]) for cid in sorted(root._watch.get(key, ()))
                if cid in root._stuck]

    def stuck(self) -> list[Constraint]:
        """The pending constraints, oldest first."""
        root = self.find()
        return [c for _, c in sorted(root._stuck.items())]

    # ---- binding -------------------------------------------------------------------

    def bind_dim(self, v: DimVar, t: DimTerm, origin: Origin) -> None:
        if type(t) is not Dim:  # (a known size contains no variable)
            if isinstance(t, DimVar) and t.id == v.id:
                return
            occ: set[tuple[str, int]] = set()
            dim_vars(t, occ)
            if ("d", v.id) in occ:
                raise conflict(origin, f"dimension {show_dim(v)} would contain itself")
        self.put(self.dims, v.id, t)
        self._wake(("d", v.id))

    def bind_row(self, v: RowVar, r: Row, origin: Origin) -> None:
        if r.var is not None and r.var.id == v.id:
            if r.known_len == 0:
                return
            raise conflict(origin, "row-rank cycle: a row would contain itself plus more axes")
        if r.known_len > MAX_RANK:
            raise conflict(origin, f"row-rank cycle: a row grew beyond {MAX_RANK} axes")
        self.put(self.rows, v.id, r)
        self._wake(("r", v.id))
