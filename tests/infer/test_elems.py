"""Seed 001 part 2 element-count constraints at the solver level: Total_elems over a whole
tensor (Num_elems and Strided_var numerators) and Exact rows, both directions, waiting on
open rows, conflicts with the operation named."""

from __future__ import annotations

import pytest

from ocannl_ast.errors import ShapeError
from ocannl_ast.infer.constraints import Origin, RowEq, RowsTotal, StridedVar
from ocannl_ast.infer.elems import exact, strided_count, total_elems
from ocannl_ast.infer.shape import Shape
from ocannl_ast.infer.solver import Solver
from ocannl_ast.infer.terms import Dim, DimVar, Row

O = Origin("vec_op")


def test_num_elems_spans_all_three_rows() -> None:
    s = Solver()
    v = s.fresh_dim()
    rows = (Row.closed((Dim(2),)), Row.closed((v,)), Row.closed((Dim(3),)))
    s.add([RowsTotal(rows, 30, O)])
    assert s.subst_dim(v) == Dim(5)


def test_num_elems_waits_for_open_rows_then_solves() -> None:
    s = Solver()
    r, v = s.fresh_row(), s.fresh_dim()
    s.add([RowsTotal((Row.open(r), Row.closed((v,))), 12, O)])
    assert isinstance(s.subst_dim(v), DimVar)
    s.add([RowEq(Row.open(r), Row.closed((Dim(4),)), O)])
    assert s.subst_dim(v) == Dim(3)


@pytest.mark.parametrize(("n", "coeff", "v"), [(12, 4, 3), (13, 4, 4), (16, 4, 4),
                                               (5, 2, 3), (1, 4, 1), (6, 1, 6)])
def test_strided_var_input_from_output(n: int, coeff: int, v: int) -> None:
    s = Solver()
    x = s.fresh_dim()
    s.add([RowsTotal((Row.closed((Dim(n),)),), StridedVar(coeff, x), O)])
    assert s.subst_dim(x) == Dim(v) == Dim(strided_count(n, coeff))


def test_strided_var_output_from_input() -> None:
    s = Solver()
    x, out = s.fresh_dim(), s.fresh_dim()
    s.add([RowsTotal((Row.closed((Dim(2), out)),), StridedVar(4, x), O),
           RowEq(Row.closed((x,)), Row.closed((Dim(3),)), O)])
    assert s.subst_dim(out) == Dim(6)  # 2 * 6 == 4 * 3


def test_strided_var_inconsistent_counts_name_the_operation() -> None:
    s = Solver()
    x = s.fresh_dim()
    s.add([RowEq(Row.closed((x,)), Row.closed((Dim(2),)), O)])
    with pytest.raises(ShapeError, match=r"vec_op.*20 elements need 5 vector cells of 4, "
                                          r"but the input has 2"):
        s.add([RowsTotal((Row.closed((Dim(20),)),), StridedVar(4, x), O)])
    assert s.subst_dim(x) == Dim(2)  # a failed add leaves no trace


def test_num_elems_mismatch_and_non_divisible() -> None:
    s = Solver()
    with pytest.raises(ShapeError, match="has 6 elements, expected 7"):
        s.add([RowsTotal((Row.closed((Dim(2),)), Row.closed((Dim(3),))), 7, O)])
    with pytest.raises(ShapeError, match="do not divide"):
        s.add([RowsTotal((Row.closed((Dim(5), s.fresh_dim())),), 12, O)])


def test_exact_pins_every_row_and_total_elems_reads_shapes() -> None:
    sh = Shape.make("lit")
    s = sh.solver
    v = s.fresh_dim()
    s.add([*exact(sh, (), (Dim(2), v), (), O), total_elems(sh, 8, O)])
    assert sh.batch == () and sh.output == (2, 4) and sh.input == ()


def test_exact_conflicts_with_given_dims() -> None:
    sh = Shape.make("lit", output_dims=[3])
    with pytest.raises(ShapeError, match="vec_op"):
        sh.solver.add(exact(sh, (), (Dim(2),), (), O))
