"""Printing a shape never changes inference: str/repr of an open shape show its variables;
`.batch/.output/.input` of an open row are a located ShapeError (they never close); only
`oc.infer_shapes`, eval and compile close."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ocannl_ast as oc

HERE = os.path.basename(__file__)


def test_str_of_an_unused_param_does_not_freeze_it() -> None:
    w2 = oc.param("w2_print", output_dims=[3], init=0.5)
    text = str(w2.shape)
    assert "3" in text and ".." in text  # the open input row prints as a row variable
    got = oc.eval(w2 @ oc.ndarray([1.0, 2.0]))
    np.testing.assert_allclose(got, np.full((3, 2), 0.5) @ np.array([1.0, 2.0]))
    assert str(w2.shape) == "2->3"


def test_repr_and_tensor_repr_do_not_freeze() -> None:
    w = oc.param("w_repr", init=2.0)
    assert "w_repr" in repr(w.shape) and "w_repr" in repr(w)
    x = np.arange(6.0).reshape(2, 3)
    got = oc.eval(w * oc.ndarray(x))
    np.testing.assert_allclose(got, 2.0 * x)
    assert w.shape.output == (2, 3)


@pytest.mark.parametrize("attr", ["output", "input"])
def test_reading_dims_of_an_open_shape_is_a_located_error_and_no_freeze(attr: str) -> None:
    w = oc.param(f"w_open_{attr}", init=1.0)
    with pytest.raises(oc.ShapeError) as info:
        getattr(w.shape, attr)  # MARK
    msg = str(info.value)
    assert f"{attr} dims of 'w_open_{attr}' are not inferred yet" in msg
    assert "oc.infer_shapes" in msg and HERE in msg
    # the failed read left the param open: a later use sizes it
    x = np.arange(12.0).reshape(3, 4)
    got = oc.eval(oc.ndarray(x, batch_axes=1) + w)
    np.testing.assert_allclose(got, x + 1.0)
    assert (w.shape.batch, w.shape.output, w.shape.input) == ((), (4,), ())


def test_reading_batch_of_an_open_result_is_an_error() -> None:
    t = oc.ndarray([1.0, 2.0]) + oc.param("b_open", init=1.0)
    with pytest.raises(oc.ShapeError, match="batch dims of 'add' are not inferred yet"):
        _ = t.shape.batch
    np.testing.assert_allclose(oc.eval(t), [2.0, 3.0])
    assert t.shape.batch == ()


def test_reading_dims_after_infer_shapes() -> None:
    m = np.arange(6.0).reshape(2, 3)
    t = oc.ndarray(m, input_axes=1) @ oc.ndarray([1.0, 1.0, 1.0])
    assert "?" in str(t.shape) or ".." in str(t.shape)  # still open: printed as variables
    oc.infer_shapes(t)
    assert str(t.shape) == "2"
    assert (t.shape.batch, t.shape.output, t.shape.input) == ((), (2,), ())
    np.testing.assert_allclose(oc.eval(t), m.sum(axis=1))


def test_closed_leaf_dims_readable_without_inference() -> None:
    x = oc.ndarray(np.zeros((2, 3, 4)), batch_axes=1, input_axes=1)
    assert (x.shape.batch, x.shape.output, x.shape.input) == ((2,), (3,), (4,))
    assert str(x.shape) == "2|4->3"


def test_printing_many_times_between_uses_changes_nothing() -> None:
    """Print at every stage of building a two-layer expression: same values as without."""
    def build(printing: bool) -> np.ndarray:
        w1 = oc.param("w1_p", output_dims=[2], init=0.25)
        b1 = oc.param("b1_p", init=0.5)
        x = oc.ndarray([1.0, -2.0, 3.0])
        h = w1 @ x
        if printing:
            for t in (w1, b1, x, h):
                str(t.shape), repr(t.shape), repr(t)
        y = oc.relu(h + b1)
        if printing:
            str(y.shape), str(b1.shape)
        return oc.eval(y)

    np.testing.assert_allclose(build(True), build(False))
