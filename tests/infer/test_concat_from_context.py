"""Issue 21 item 6 (seed 004): a concatenation almost all of whose components are
discardable, or one whose component is a free parameter, is sized from context: the sum
is an inequality the live component is inferred through, not an equation guessed from
the data alone."""

from __future__ import annotations

import numpy as np

import ocannl_ast as oc


def test_split_suffix_sized_by_its_use() -> None:
    x = oc.ndarray(np.arange(7.0))
    got = oc.eval(oc.einsum("a^b => b", x) * oc.ndarray(np.ones(4)))
    np.testing.assert_array_equal(got, np.arange(7.0)[3:])


def test_split_prefix_sized_by_its_use() -> None:
    x = oc.ndarray(np.arange(7.0))
    got = oc.eval(oc.einsum("a^b => a", x) + oc.ndarray(np.zeros(2)))
    np.testing.assert_array_equal(got, np.arange(7.0)[:2])


def test_split_without_context_keeps_the_old_guess() -> None:
    """Nothing bounds b: the discardable prefix is the empty summand, b takes it all."""
    got = oc.eval(oc.einsum("a^b => b", oc.ndarray(np.arange(5.0))))
    np.testing.assert_array_equal(got, np.arange(5.0))


def test_free_param_component_sized_by_its_use() -> None:
    q = oc.param("q", init=7.0)
    r = oc.concat("p; q => p^q", oc.ndarray([1.0, 2.0, 3.0]), q) * oc.ndarray(np.ones(5))
    got = oc.eval(r)
    assert q.shape.dims() == (2,)
    assert got.shape == (5,)
    np.testing.assert_array_equal(got[:3], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(got[3:], [7.0, 7.0])


def test_context_size_contradiction_is_a_located_error() -> None:
    x = oc.ndarray(np.arange(3.0))
    try:
        oc.eval(oc.einsum("a^b => b", x) * oc.ndarray(np.ones(4)))
    except oc.ShapeError as e:
        assert "test_concat_from_context.py" in str(e)
    else:
        raise AssertionError("a 4-long suffix of a 3-long axis must be a ShapeError")
