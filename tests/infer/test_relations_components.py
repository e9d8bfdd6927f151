"""The one table of row relations (infer/relations.py) and per-component solver state.

Relations: every logic has an entry; a logic missing from the table fails loudly in shape
inference AND in projections (they read the same table); the constraints and projections of
the table's logics agree with NumPy from the user's side. Components: each graph's shapes
live in their own solver, operations merge components, ids come from one source.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.errors import ShapeError
from ocannl_ast.infer.constraints import Origin, RowEq, RowIneq
from ocannl_ast.infer.logic import shape_constraints
from ocannl_ast.infer.projections import derive_projections, fresh_symbol
from ocannl_ast.infer.relations import (
    BatchSlice,
    Compose,
    Einsum,
    Logic,
    Pointwise,
    RowBroadcast,
    RowSame,
    Stack,
    Terminal,
    Transpose,
    row_relations,
)
from ocannl_ast.infer.shape import Shape, join_shapes
from ocannl_ast.infer.solver import Solver
from ocannl_ast.infer.spec_parser import parse_spec
from ocannl_ast.infer.terms import Kind

SAMPLES: dict[type, tuple[Logic, int]] = {
    Pointwise: (Pointwise(), 2),
    Compose: (Compose(), 2),
    Transpose: (Transpose(), 1),
    Einsum: (Einsum(parse_spec("ij;jk=>ik")), 2),
    BatchSlice: (BatchSlice(fresh_symbol("b")), 1),
    Stack: (Stack(Kind.OUTPUT, 2), 2),
    Terminal: (Terminal(), 0),
}


@dataclass(frozen=True, slots=True)
class Unlisted:
    """A logic someone added without a row-relations entry."""


def test_every_logic_has_relations() -> None:
    assert set(typing.get_args(Logic)) == set(SAMPLES)
    for logic, n in SAMPLES.values():
        rels = row_relations(logic, n)
        assert isinstance(rels, tuple)
        assert (rels == ()) == isinstance(logic, Terminal)


def test_unlisted_logic_fails_in_shape_inference(solver: Solver) -> None:
    r, a = Shape.make("r", solver=solver), Shape.make("a", solver=solver)
    with pytest.raises(AssertionError):
        shape_constraints(Unlisted(), solver, r, [a], Origin("x"))  # type: ignore[arg-type]


def test_unlisted_logic_fails_in_projections() -> None:
    with pytest.raises(AssertionError):
        derive_projections(Unlisted(), ((), (2,), ()), [((), (2,), ())])  # type: ignore[arg-type]


@pytest.mark.parametrize("key", [Pointwise, Compose, Transpose, BatchSlice])
def test_shape_constraints_are_the_table(solver: Solver, key: type) -> None:
    """Each broadcast relation is one RowIneq on exactly the table's rows (same order)."""
    logic, n = SAMPLES[key]
    shapes = [Shape.make(f"t{k}", solver=solver) for k in range(n + 1)]
    cs = shape_constraints(logic, solver, shapes[0], shapes[1:], Origin("x"))
    rels = row_relations(logic, n)
    ineqs = [(c.cur, c.subr) for c in cs if isinstance(c, RowIneq)]
    want = [(shapes[r.cur.slot].row(r.cur.kind), shapes[r.sub.slot].row(r.sub.kind))
            for r in rels if isinstance(r, RowBroadcast)]
    assert ineqs == want
    same = [(c.a, c.b) for c in cs if isinstance(c, RowEq)]
    for r in rels:
        if isinstance(r, RowSame):
            assert (shapes[r.a.slot].row(r.a.kind), shapes[r.b.slot].row(r.b.kind)) in same


def test_arity_checked_by_the_table() -> None:
    with pytest.raises(ShapeError, match="compose takes 2 operand"):
        row_relations(Compose(), 3)
    with pytest.raises(ShapeError, match="transpose takes 1 operand"):
        row_relations(Transpose(), 2)


def test_table_logics_against_numpy() -> None:
    """Compose, transpose and pointwise broadcast read from the table give NumPy's values."""
    a = np.arange(6, dtype=np.float64).reshape(2, 3) / 7
    b = np.arange(12, dtype=np.float64).reshape(3, 4) / 5 - 1
    c = np.arange(4, dtype=np.float64) / 3
    ta = oc.ndarray(a.tolist(), input_axes=1)
    tb = oc.ndarray(b.tolist(), input_axes=1)
    tc = oc.ndarray([c.tolist()], input_axes=1)  # 1 output axis, broadcast to 2
    got = oc.eval(oc.relu(ta @ tb) + tc)
    np.testing.assert_allclose(got, np.maximum(a @ b, 0) + c, rtol=1e-5)


# ---- components -----------------------------------------------------------------------


def _graph(i: int) -> oc.Tensor:
    x = oc.term(f"x{i}", batch_dims=[4], output_dims=[3])
    w = oc.param(f"w{i}", output_dims=[5])
    return oc.relu(w @ x)


def test_independent_graphs_have_their_own_solver() -> None:
    ys = [_graph(i) for i in range(30)]
    for y in ys:
        oc.infer_shapes(y)
    solvers = {id(y.shape.solver) for y in ys}
    assert len(solvers) == len(ys)
    sizes = {ys[k].shape.solver.live_size() for k in (0, -1)}
    assert len(sizes) == 1  # the 30th graph's solver holds no more than the first's
    assert ys[-1].shape.batch == (4,) and ys[-1].shape.output == (5,)


def test_operation_merges_components() -> None:
    y1, y2 = _graph(1), _graph(2)
    assert y1.shape.solver is not y2.shape.solver
    z = y1 + y2
    assert z.shape.solver is y1.shape.solver is y2.shape.solver
    oc.infer_shapes(z)
    assert z.shape.batch == (4,) and z.shape.output == (5,)


def test_infer_shapes_over_separate_components() -> None:
    y1, y2 = _graph(1), _graph(2)
    oc.infer_shapes(y1, y2)
    assert y1.shape.output == y2.shape.output == (5,)


def test_constraint_across_unjoined_components_fails_loudly() -> None:
    a, b = Shape.make("a"), Shape.make("b")
    with pytest.raises(ShapeError, match="internal: .*another shape component"):
        a.solver.add([RowEq(a.row(Kind.OUTPUT), b.row(Kind.OUTPUT), Origin("x"))])
    join_shapes(a, b).add([RowEq(a.row(Kind.OUTPUT), b.row(Kind.OUTPUT), Origin("x"))])
    assert a.solver is b.solver


def test_failed_operation_across_components_leaves_both_usable() -> None:
    a = oc.ndarray([1.0, 2.0, 3.0])
    b = oc.ndarray([1.0, 2.0])
    with pytest.raises(ShapeError):
        _ = a + b
    np.testing.assert_allclose(oc.eval(a * 2.0), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(oc.eval(b + 1.0), [2.0, 3.0])


def test_one_id_source() -> None:
    s1, s2 = Solver(), Solver()
    ids = [s1.fresh_dim().id, fresh_symbol("i").id, s2.fresh_row().id, s1.fresh_row().id,
           Shape.make("x").id]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
