"""Golden files for the whole pipeline: assignments IR, loop IR and C source of a matmul,
a broadcast and a reduction built through the public API (regenerate with
OCANNL_AST_REGEN_GOLDEN=1 and review the diff)."""

from __future__ import annotations

import numpy as np
import pytest
from golden_util import assert_golden

import ocannl_ast as oc
from ocannl_ast.lowering.asgn_print import print_asgn
from ocannl_ast.lowering.loop_print import print_program
from ocannl_ast.tensor.pipeline import Options, derive_projections, to_assignments
from ocannl_ast.tensor.context import Context


def _matmul() -> oc.Tensor:
    a = oc.ndarray(np.ones((2, 3)), label="a")
    b = oc.ndarray(np.ones((3, 4)), label="b")
    return oc.einsum("ij;jk=>ik", a, b)


def _broadcast() -> oc.Tensor:
    m = oc.ndarray(np.ones((2, 3)), label="m")
    return oc.number(2.0, label="s") * m


def _reduction() -> oc.Tensor:
    m = oc.ndarray(np.ones((2, 3)), label="m")
    return oc.einsum("pq=>p", m)


CASES = {"matmul": _matmul, "broadcast": _broadcast, "reduction": _reduction}


@pytest.mark.parametrize("name", sorted(CASES))
def test_pipeline_golden(name: str) -> None:
    t = CASES[name]()
    prog, asgn, _ = Context().lower_code(t.forward, name=name)
    assert_golden(f"pipeline_{name}.asgn.txt", print_asgn(asgn))
    assert_golden(f"pipeline_{name}.loops.txt", print_program(prog))
    assert_golden(f"pipeline_{name}.c", oc.render(t.forward).replace("routine", name))
    unsimplified = to_assignments(derive_projections(t.forward, Options(name)), Options(name))
    assert print_asgn(unsimplified) == print_asgn(asgn)
