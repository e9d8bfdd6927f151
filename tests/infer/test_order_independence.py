"""Issue 21: the solved result does not depend on the order constraints arrive in, where
order could matter: an equation between two open rows whose overlap is unknown (labels
left of a row variable against a row open on the left, item 1), LUB closing through fixed
indices (item 5). Hypothesis properties at the solver level, and from the user's side."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ocannl_ast as oc
from ocannl_ast.infer.constraints import Constraint, DimAtLeast, Origin, RowEq, RowIneq
from ocannl_ast.infer.solver import Solver
from ocannl_ast.infer.terms import Dim, DimTerm, Row


class _Shape:
    def __init__(self, label: str, row: Row, terminal: bool) -> None:
        self.label, self.row, self.is_terminal, self.is_param = label, row, terminal, False

    def raw_rows(self) -> tuple[Row, Row, Row]:
        return Row.closed(()), self.row, Row.closed(())


def _sizes(s: Solver, r: Row) -> tuple[int, ...]:
    r = s.subst_row(r)
    assert r.var is None
    out = []
    for d in r.dims:
        assert isinstance(d, Dim)
        out.append(d.size)
    return tuple(out)


@st.composite
def _programs(draw: st.DrawFn) -> tuple[list[int], int, int, int, list[int]]:
    ground = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    k = draw(st.integers(0, len(ground)))  # labels left of the row variable
    e = draw(st.integers(0, len(ground) - k))  # labels right of it
    depth = draw(st.integers(1, 3))  # pointwise results stacked on the leaf
    n_constraints = 2 * depth + 1 + (1 if k else 0)
    order = draw(st.permutations(list(range(n_constraints))))
    return ground, k, e, depth, order


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_programs(), st.booleans())
def test_open_row_einsum_solves_alike_in_any_order(
        prog: tuple[list[int], int, int, int, list[int]], one_by_one: bool) -> None:
    """`leaf -> p1 -> ... -> pd` pointwise results, then an einsum operand pattern
    `beg ++ ..own.. ++ end` equated to `pd`: in any order, added at once or one by one, the
    labels bind to the leaf's first / last axes and the row variable to the rest."""
    ground, k, e, depth, order = prog
    s = Solver()
    o = Origin("test")
    leaf = Row.closed(tuple(Dim(n) for n in ground))
    shapes = [_Shape("leaf", leaf, True)]
    cs: list[Constraint] = []
    below = leaf
    for i in range(depth):
        row = Row.open(s.fresh_row())
        shapes.append(_Shape(f"p{i}", row, False))
        cs.append(RowIneq(row, below, o))
        cs.append(RowIneq(row, Row.closed(tuple(Dim(1) for _ in ground[:1])), o))
        below = row
    beg: tuple[DimTerm, ...] = tuple(s.fresh_dim("b") for _ in range(k))
    end: tuple[DimTerm, ...] = tuple(s.fresh_dim("e") for _ in range(e))
    own_var = s.fresh_row()
    own = Row.open(own_var)
    shapes.append(_Shape("result", own, False))
    cs.append(RowEq(below, Row.open(own_var, beg, end), o))
    if k:  # a fixed index 0 on the first label: it needs one position (never more)
        cs.append(DimAtLeast(beg[0], 1, o))
    ordered = [cs[i] for i in order]
    if one_by_one:
        for c in ordered:
            s.add([c])
    else:
        s.add(ordered)
    s.close(shapes)
    assert _sizes(s, Row.closed(beg)) == tuple(ground[:k])
    assert _sizes(s, Row.closed(end)) == tuple(ground[len(ground) - e:])
    assert _sizes(s, own) == tuple(ground[k:len(ground) - e])
    assert _sizes(s, below) == tuple(ground)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations(list(range(4))), st.lists(st.integers(1, 3), min_size=2, max_size=3))
def test_consumers_built_in_any_order_agree_with_leaf(order: list[int], dims: list[int]
                                                      ) -> None:
    """Several einsums over one pointwise result, built in any order, give the shapes the
    same einsums give over the leaf itself."""
    data = np.ones(dims)

    def build(pointwise: bool) -> list[oc.Tensor]:
        x = oc.ndarray(data)
        src = x * 1.0 if pointwise else x
        makers = [lambda: oc.einsum("h, ..c.. => ..c..", src),
                  lambda: oc.einsum("..c.., z => ..c..", src),
                  lambda: oc.einsum("h, ..c.., z => h, z", src),
                  lambda: oc.einsum("h, ..c.. => h", src + 0.0)]
        made: dict[int, oc.Tensor] = {}
        for i in order:
            made[i] = makers[i]()
        return [made[i] for i in range(4)]

    leaf, comp = build(False), build(True)
    oc.infer_shapes(*comp)
    oc.infer_shapes(*leaf)
    assert [str(t.shape) for t in comp] == [str(t.shape) for t in leaf]
    assert str(leaf[0].shape) == ",".join(map(str, dims[1:]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations(list(range(3))), st.integers(1, 4), st.integers(0, 2))
def test_fixed_index_lub_in_any_order(order: list[int], n: int, idx: int) -> None:
    """A fixed-index axis under a label closes to the label's size, whatever order the
    tensors were built in (item 5)."""
    made: dict[int, oc.Tensor] = {}
    big = max(n, idx + 1)
    for i in order:
        if i == 0:
            made[0] = oc.einsum(f"i=>i{idx}", oc.ndarray(np.arange(3.0)))
        elif i == 1:
            made[1] = oc.ndarray(np.ones((2, big)))
        else:
            made[2] = oc.einsum("j=>j0", oc.ndarray(np.arange(2.0)))
    r = oc.einsum("ik;jk=>ijk", made[0], made[2] * made[1])
    oc.infer_shapes(r)
    assert str(r.shape) == f"3,2,{big}"
    assert str(made[2].shape) == f"2,{big}"
