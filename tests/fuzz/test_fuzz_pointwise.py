"""Differential fuzzing of pointwise/broadcast expression DAGs against NumPy: constants,
data, params with every init kind (number, NumPy array, oc.ndarray, tensor expression,
random, inferred dims), unary and binary operators, shared subexpressions."""

from __future__ import annotations

from fuzz_harness import report, run_programs, seeds
from gen_expr import pointwise_program


def _check(kind: str, category: int, n: int, leaves: tuple[str, ...]) -> None:
    programs = [pointwise_program(sd, leaves, kind) for sd in seeds(category, n)]
    failures = run_programs(programs)
    assert not failures, report(failures, len(programs))


def test_fuzz_pointwise_data_and_constants() -> None:
    _check("pointwise/data", 20, 90, ("ndarray", "ndarray", "number"))


def test_fuzz_pointwise_params_pinned() -> None:
    """Params with explicit dims: init a number, a NumPy array, random, an expression."""
    _check("pointwise/params", 21, 80, ("ndarray", "param_num", "param_np", "param_rand",
                                         "param_expr"))


def test_fuzz_pointwise_param_init_ndarray() -> None:
    """`oc.param(name, init=oc.ndarray(...))`: the param's shape and values from the data."""
    _check("pointwise/param_ndarray", 22, 40, ("ndarray", "param_ndarray"))


def test_fuzz_pointwise_param_inferred_dims() -> None:
    """Params without dims, closed from their uses (least upper bound, seed 002)."""
    _check("pointwise/param_inferred", 23, 50, ("ndarray", "param_inferred"))
