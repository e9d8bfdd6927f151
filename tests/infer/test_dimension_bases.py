"""Issue 21 item 7 (seeds 000/001): a ground dimension is a size and a basis. A dim that
closes from a compose or a broadcast against a labelled partner keeps the partner's basis,
for size 1 as for larger sizes, and shape strings show it."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


@pytest.mark.parametrize("nq,np_", [(1, 1), (2, 3), (1, 3), (2, 1)])
def test_compose_with_labelled_partners_keeps_bases(nq: int, np_: int) -> None:
    xq = oc.param("x_q", output_dims=[(nq, "q")], init=1.0)
    yp = oc.param("y_p", output_dims=[(np_, "p")], init=2.0)
    hey = oc.param("hey", init=3.0)
    r = hey @ xq + yp
    oc.infer_shapes(r)
    assert str(hey.shape) == f"q={nq}->p={np_}"
    assert str(r.shape) == f"p={np_}"
    assert hey.shape.labels() == ("p", "q")
    # values are unchanged by the bases: 3 * sum over q of 1 + 2
    np.testing.assert_allclose(oc.eval(r), np.full(np_, 3.0 * nq + 2.0))


def test_unit_basis_meets_a_different_basis_only_by_broadcasting() -> None:
    """A labelled size-1 axis broadcasts into a differently labelled one (broadcasting is
    no equation), so no clash; the result keeps the larger axis's basis."""
    a = oc.param("a", output_dims=[(1, "q")], init=1.0)
    b = oc.param("b", output_dims=[(3, "p")], init=2.0)
    r = a + b
    oc.infer_shapes(r)
    assert str(r.shape) == "p=3"


def test_einsum_label_over_a_labelled_unit_keeps_its_basis() -> None:
    x = oc.param("xu", output_dims=[(1, "q"), (3, "p")], init=1.0)
    r = oc.einsum("i, j => j, i", x)
    oc.infer_shapes(r)
    assert str(r.shape) == "p=3,q=1"
    np.testing.assert_allclose(oc.eval(r), np.ones((3, 1)))


def test_differently_labelled_units_give_no_basis() -> None:
    """Two size-1 partners of different bases: the closed dim has no basis to keep."""
    a = oc.param("ua", output_dims=[(1, "q")], init=1.0)
    b = oc.param("ub", output_dims=[(1, "p")], init=2.0)
    r = a + b
    oc.infer_shapes(r)
    assert str(r.shape) == "1"
    np.testing.assert_allclose(oc.eval(r), [3.0])
