"""Row-rank cycles through the public API: broadcasts that together ask a row for more axes
than itself are a ShapeError naming every operation of the cycle, found at once (not after
the solver's step budget), and the failed operation leaves the solver usable."""

from __future__ import annotations

import itertools
import os
import time

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.infer.constraints import Origin, RowIneq
from ocannl_ast.infer.solver import Solver
from ocannl_ast.infer.terms import Row

HERE = os.path.basename(__file__)


@pytest.mark.parametrize("length", [2, 3, 5])
def test_pointwise_chain_closed_by_an_einsum_is_a_named_cycle(length: int) -> None:
    x = oc.param(f"x_cyc{length}", init=1.0)
    chain = [x]
    for k in range(length - 1):
        chain.append(chain[-1] + oc.param(f"p_cyc{length}_{k}", init=1.0))
    start = time.perf_counter()
    with pytest.raises(oc.ShapeError) as info:
        oc.einsum("..a..;..a..i=>..a..", chain[-1], x)  # the last row needs one axis less
    assert time.perf_counter() - start < 1.0
    msg = str(info.value)
    assert "row-rank cycle" in msg and f"these {length - 1} broadcasts" in msg, msg
    assert msg.count("add (pointwise)") >= length - 1 and "einsum" in msg and HERE in msg
    # the solver was left as it was: the chain still evaluates
    np.testing.assert_allclose(oc.eval(chain[-1] + oc.ndarray([0.0, 1.0])), [length,
                                                                             length + 1.0])


@pytest.mark.parametrize("n", [1, 2, 3, 4, 6])
def test_solver_cycles_found_at_once_in_every_order(n: int) -> None:
    """n row variables each one axis longer than the next, constraints in every rotation
    and added one by one or together: always the cycle, well under a second."""
    o = Origin("unit")
    for rot, together in itertools.product(range(n), (False, True)):
        s = Solver()
        rs = [s.fresh_row() for _ in range(n)]
        cs = [RowIneq(Row.open(rs[i]), Row.open(rs[(i + 1) % n], (), (s.fresh_dim(),)), o)
              for i in range(n)]
        cs = cs[rot:] + cs[:rot]
        start = time.perf_counter()
        with pytest.raises(oc.ShapeError, match="row-rank cycle"):
            if together:
                s.add(cs)
            else:
                for c in cs:
                    s.add([c])
        assert time.perf_counter() - start < 1.0


def test_zero_increment_cycle_is_not_an_error() -> None:
    """Rows bounded by each other with no extra axes just have equal ranks."""
    o = Origin("unit")
    s = Solver()
    a, b, c = (s.fresh_row() for _ in range(3))
    d = s.fresh_dim()
    s.add([RowIneq(Row.open(a, (), (d,)), Row.open(b, (), (d,)), o),
           RowIneq(Row.open(b), Row.open(c), o), RowIneq(Row.open(c), Row.open(a), o)])
