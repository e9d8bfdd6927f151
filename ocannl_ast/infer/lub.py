"""Least upper bounds for closing (seed 002): how many axes a leaf row variable takes and
which size a leaf dim variable takes, read off the pending broadcast inequalities.

Input: a solver between propagation runs. Output: an index built once per closing step
(pending inequalities grouped by the variable on their smaller side, substituted once), so
each bound costs the inequalities that mention its variable, not every pending one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .constraints import DimAtLeast, DimIneq, RowIneq
from .terms import AffineDim, Dim, DimTerm, DimVar, Row, dim_vars

if TYPE_CHECKING:
    from .state import SolverState

_NONE = object()


class Bounds:
    """The pending inequalities of a solver, indexed by the variable they bound from above.

    Valid until the solver binds anything: build a new one after binding.
    """

    def __init__(self, s: SolverState) -> None:
        self.rows_above: dict[int, list[tuple[Row, Row]]] = {}  #: subr var -> (cur, subr)
        self.dims_above: dict[int, list[DimTerm]] = {}  #: subr var -> curs
        self.at_least: dict[int, int] = {}  #: dim var -> positions a fixed index needs
        self.under_label: set[int] = set()  #: dim vars an einsum label bounds from above
        #: dim vars bounded from below by something other than a size-1 axis
        self.lower_bounded: set[int] = set()
        #: `cur >= affine` waiting on the affine's size: (the affine's dim vars, cur's var)
        self.affine_below: list[tuple[frozenset[int], int]] = []
        self.one_bounded = one_bounded_ids(s)
        self._lub_memo: dict[tuple[int, bool], int | None] = {}  #: `row_lub_len` answers
        self._cuts = 0  #: walks `row_lub_len` cut at a row seen before (a cycle)
        #: dim var -> basis of the size-1 axes below it (None: they disagree)
        self.unit_basis: dict[int, str | None] = {}
        for var, lbl in s.unit_basis.values():
            d = s.subst_dim(var)
            if isinstance(d, DimVar):
                old = self.unit_basis.get(d.id, lbl)
                self.unit_basis[d.id] = lbl if old == lbl else None
        subst_row, rows_above = s.subst_row, self.rows_above
        for c in s.stuck():
            if isinstance(c, RowIneq):  # most of them (hot: without the match)
                sub = subst_row(c.subr)
                if sub.var is not None:
                    rows_above.setdefault(sub.var.id, []).append((subst_row(c.cur), sub))
                continue
            match c:
                case DimIneq():
                    d = s.subst_dim(c.subr)
                    if isinstance(d, DimVar):
                        self.dims_above.setdefault(d.id, []).append(s.subst_dim(c.cur))
                        if c.label:
                            self.under_label.add(d.id)
                    up = s.subst_dim(c.cur)
                    if isinstance(up, DimVar) and d != Dim(1):
                        self.lower_bounded.add(up.id)
                        if isinstance(d, AffineDim):
                            parts: set[tuple[str, int]] = set()
                            dim_vars(d, parts)
                            self.affine_below.append((frozenset(i for _, i in parts), up.id))
                case DimAtLeast():
                    d = s.subst_dim(c.d)
                    if isinstance(d, DimVar):
                        self.lower_bounded.add(d.id)
                        self.at_least[d.id] = max(self.at_least.get(d.id, 1), c.n)
                case _:
                    pass

    def row_lub_len(self, v: int, seen: frozenset[int] = frozenset(),
                    beyond: bool = False) -> int | None:
        """How many axes a leaf row variable takes when closed upward: the fewest its upper
        bounds allow, through chains of open rows (their known axes count; a row with none
        and nothing above it sets no bound).

        Past the first open row with known axes (`beyond`), a size-1 axis next to the row
        variable (a size-1 dim, or a variable only size-1 axes bound from below) does not
        count: it is an axis broadcasting added above that row (a `0.0 * t` of a loss's
        mean), not one the leaf must fill. Counting it would give a parameter a phantom
        size-1 axis depending on which uses follow it (issue 21)."""
        # memoized per (variable, beyond) where no cycle cut the walk above it (then the
        # answer does not depend on `seen`: a seen row above would be such a cycle)
        hit = self._lub_memo.get((v, beyond), _NONE)
        if hit is not _NONE:
            return hit  # type: ignore[return-value]
        cuts = self._cuts
        best: int | None = None
        for cur, sub in self.rows_above.get(v, ()):
            if cur.var is None:
                n = len(cur.dims)
            elif cur.var.id in seen or cur.var.id == v:
                self._cuts += 1
                continue
            else:
                k = self._counted(cur) if beyond else cur.known_len
                up = self.row_lub_len(cur.var.id, seen | {v}, beyond or cur.known_len > 0)
                if up is None and k == 0:
                    continue  # an unbounded row above: it will grow to fit, no bound here
                n = k + (up or 0)
            n -= sub.known_len
            best = n if best is None else min(best, n)
        out = None if best is None else max(best, 0)
        if self._cuts == cuts:
            self._lub_memo[(v, beyond)] = out
        return out

    def _counted(self, cur: Row) -> int:
        """Known axes of an open row, less the size-1 axes next to its row variable."""
        if cur.beg:
            return cur.known_len
        k = 0
        while k < len(cur.dims) and self.is_unit(cur.dims[k]):
            k += 1
        return len(cur.dims) - k

    def is_unit(self, d: DimTerm) -> bool:
        """A size-1 dim, or a variable whose only lower bounds are size-1 axes."""
        if isinstance(d, Dim):
            return d.size == 1
        return (isinstance(d, DimVar) and d.id in self.one_bounded
                and d.id not in self.lower_bounded)

    def dim_lub(self, v: int) -> int | None:
        """Least upper bound of a dim variable: the dims > 1 reachable upward through the
        inequalities (v <= w <= 3); two different ones collapse it to 1. Collected over
        the whole upward graph, so the answer does not depend on the order of the
        constraints (a visited variable must not hide a bound reachable another way)."""
        d = self.lub_dim(v)
        return None if d is None else d.size

    def _found(self, v: int) -> set[Dim]:
        found: set[Dim] = set()
        for w in self.above([v]):
            found.update(c for c in self.dims_above.get(w, ()) if isinstance(c, Dim)
                         and c.size > 1)
        return found

    def conflicting_sizes(self, v: int) -> list[int]:
        """The sizes above 1 that bound `v` from above, when they disagree (else [])."""
        sizes = sorted({d.size for d in self._found(v)})
        return sizes if len(sizes) > 1 else []

    def lub_dim(self, v: int) -> Dim | None:
        """`dim_lub` as a dim with the basis the bounds agree on (seeds 000/001: a ground
        dimension is a size and a basis; closing must not drop a known basis)."""
        found = self._found(v)
        sizes = {d.size for d in found}
        if not sizes:
            return None
        if len(sizes) > 1:
            return Dim(1)
        labels = {d.label for d in found if d.label is not None}
        return Dim(sizes.pop(), labels.pop() if len(labels) == 1 else None)

    def unit_label(self, v: int) -> str | None:
        """The basis of a dim closing to 1: the one basis of the labelled size-1 axes that
        bound it or a dim above it from below (`{hey} @ x_q + y_p`: hey's dims close to
        `q=1` and `p=1`), None when there is none or they disagree."""
        if not self.unit_basis:
            return None
        labels = {self.unit_basis[w] for w in self.above([v]) if w in self.unit_basis}
        return labels.pop() if len(labels) == 1 else None

    def unit(self, v: int, n: int = 1) -> Dim:
        """The dim `v` closes to when guessed `n` (a basis only for 1)."""
        return Dim(n, self.unit_label(v) if n == 1 else None)

    def above(self, vs: list[int]) -> list[int]:
        """`vs` and every dim variable above them (v <= w <= ...), sorted."""
        seen, todo = set(vs), list(vs)
        while todo:
            for cur in self.dims_above.get(todo.pop(), ()):
                if isinstance(cur, DimVar) and cur.id not in seen:
                    seen.add(cur.id)
                    todo.append(cur.id)
        return sorted(seen)

    def bounded(self, seeds: set[int]) -> set[int]:
        """`seeds` and every dim variable above them (`above`), and above an affine dim
        all of whose variables are among those: `cur >= 2*h+w` with `h` and `w` bounded
        (a size-1 axis merged by flatten: `h >= 1` closes to 1) is bounded by the affine's
        size, known once they close, as `cur >= h` is by `h`."""
        out = set(self.above(sorted(seeds)))
        grown = True
        while grown:
            new = [cur for vs, cur in self.affine_below if cur not in out and vs <= out]
            out.update(self.above(new))
            grown = bool(new)
        return out

    def reaches(self, v: int, targets: set[int]) -> bool:
        """Whether `v` or a variable above it (v <= w <= ...) is one of `targets`."""
        seen, todo = {v}, [v]
        while todo:
            x = todo.pop()
            if x in targets:
                return True
            for cur in self.dims_above.get(x, ()):
                if isinstance(cur, DimVar) and cur.id not in seen:
                    seen.add(cur.id)
                    todo.append(cur.id)
        return False


def one_bounded_ids(s: SolverState) -> set[int]:
    """Unsolved dim variables some use bounds by a size-1 axis: they close to 1."""
    out: set[int] = set()
    for v in s.one_bounded.values():
        d = s.subst_dim(v)
        if isinstance(d, DimVar):
            out.add(d.id)
    return out
