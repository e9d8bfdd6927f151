"""Issue 21 item 5: closing takes the least upper bound before guessing 1 (seed 002). A dim
bounded below by a fixed index and shared through an einsum label closes to the label's
size instead of to 1 (which then conflicted); the answer does not depend on the order the
constraints were stated in."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ocannl_ast as oc


def _a() -> oc.Tensor:
    return oc.einsum("i=>i1", oc.ndarray(np.arange(3.0)))  # a's 2nd axis >= 2


def _b() -> oc.Tensor:
    return oc.einsum("j=>j0", oc.ndarray(np.arange(2.0)))  # b's 2nd axis >= 1


def _a_np(k: int) -> np.ndarray:
    out = np.zeros((3, k))
    out[:, 1] = np.arange(3.0)
    return out


def _b_np(k: int) -> np.ndarray:
    out = np.zeros((2, k))
    out[:, 0] = np.arange(2.0)
    return out


def test_issue_example_closes_to_the_lub() -> None:
    a, b = _a(), _b()
    r = oc.einsum("ik;jk=>ijk", a, b)
    got = oc.eval(r)
    assert got.shape == (3, 2, 2)
    np.testing.assert_array_equal(oc.eval(a), _a_np(2))
    np.testing.assert_array_equal(oc.eval(b), _b_np(2))
    np.testing.assert_array_equal(got, np.einsum("ik,jk->ijk", _a_np(2), _b_np(2)))


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_independent_of_construction_and_operand_order(order: tuple[int, ...]) -> None:
    """The same constraints stated in any order (builders called in every order, the
    operands swapped) solve to the same sizes and values."""
    made: dict[str, oc.Tensor] = {}
    builders = [("a", _a), ("b", _b), ("one", lambda: oc.ndarray(np.ones(1)))]
    for ix in order:
        name, f = builders[ix]
        made[name] = f()
    a1, b1 = made["a"] + 1.0, made["b"] * made["one"] + 1.0
    r = (oc.einsum("ik;jk=>ijk", a1, b1) if order[0] < order[1]
         else oc.einsum("jk;ik=>ijk", b1, a1))
    got = oc.eval(r)
    want = np.einsum("ik,jk->ijk", _a_np(2) + 1.0, _b_np(2) + 1.0)
    np.testing.assert_allclose(got, want)


def test_fixed_index_alone_still_closes_to_its_minimum() -> None:
    """Without any use bounding it from above, a fixed index's axis is as small as it
    can be: index 2 needs 3 positions."""
    got = oc.eval(oc.einsum("i=>i2", oc.ndarray(np.arange(2.0))))
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 1]])


def test_unused_constraint_still_counts() -> None:
    """A use built but never evaluated still bounds the dim (it was stated when the
    tensor was built)."""
    a, b = _a(), _b()
    _unused = oc.einsum("ik;jk=>ijk", a, b)
    np.testing.assert_array_equal(oc.eval(b), _b_np(2))
