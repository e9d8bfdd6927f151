"""Dimension captures and user shape constraints (issue 21 item 8): `oc.capture(t, label)`
is the size a spec label of t's operation is solved to (OCANNL's variable_ref), readable
as a number after inference and as a one-cell tensor before; `oc.set_dim` / `oc.set_equal`
add constraints to inference (OCANNL's Shape.set_dim / set_equal)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc

RNG = np.random.default_rng(8)


def test_capture_a_reduced_label_after_inference() -> None:
    x = RNG.normal(size=(3, 5))
    y = oc.einsum("ij=>i", oc.ndarray(x))
    j, i = oc.capture(y, "j"), oc.capture(y, "i")
    oc.infer_shapes(y)
    assert (j.value, int(i), float(j)) == (5, 3, 5.0)
    assert np.zeros((i, j)).shape == (3, 5)  # usable wherever Python wants an int


def test_capture_is_not_readable_before_inference_and_never_closes() -> None:
    t = oc.term("t")
    y = oc.einsum("ij=>j", t)
    k = oc.capture(y, "i")
    with pytest.raises(oc.ShapeError, match="not inferred yet"):
        _ = k.value
    z = y + oc.ndarray(np.ones(4))  # later uses still count: reading closed nothing
    oc.set_dim(k, 2)
    oc.infer_shapes(z)
    assert (k.value, z.shape.output) == (2, (4,))


def test_captured_size_feeds_a_mean_before_inference() -> None:
    x = RNG.normal(size=(2, 6))
    y = oc.einsum("bi=>b", oc.ndarray(x))
    mean = y / oc.capture(y, "i").embed()
    np.testing.assert_allclose(oc.eval(mean, precision="float64"), x.mean(axis=1), rtol=1e-12)


def test_capture_of_a_param_label_inferred_from_context_sizes_a_new_param() -> None:
    p = oc.param("cap_p")
    data = oc.ndarray(np.ones((3, 4)))
    y = oc.einsum("i;ij=>j", p, data)
    n = oc.capture(y, "i")
    oc.infer_shapes(y)
    assert n.value == 3 and p.shape.output == (3,)
    q = oc.param("cap_q", output_dims=[n.value], init=1.0)
    assert oc.eval(q).shape == (3,)


def test_capture_of_a_label_read_through_a_broadcast_operand() -> None:
    a, b = oc.ndarray(np.arange(3.0)), oc.ndarray(np.array([2.0]))
    y = oc.einsum("i;i=>", a, b)  # b's size-1 axis broadcasts: i is 3
    i = oc.capture(y, "i")
    oc.infer_shapes(y)
    assert i.value == 3
    assert oc.eval(i.embed()).tolist() == [3.0]


def test_capture_through_concat_components() -> None:
    y = oc.concat("a;b=>a^b", oc.ndarray(np.ones(2)), oc.ndarray(np.ones(5)))
    a, b = oc.capture(y, "a"), oc.capture(y, "b")
    oc.infer_shapes(y)
    assert (a.value, b.value, y.shape.output) == (2, 5, (7,))


def test_capture_errors() -> None:
    x = oc.ndarray(np.ones(3))
    with pytest.raises(oc.ArgumentError, match="not built from an einsum spec") as e:
        oc.capture(x * 2.0, "i")
    assert Path(__file__).name in str(e.value)
    with pytest.raises(oc.ArgumentError, match="no axis labeled 'k'"):
        oc.capture(oc.einsum("i=>", x), "k")


def test_set_dim_and_set_equal_constrain_inference() -> None:
    a, b = oc.term("sa"), oc.term("sb")
    oc.set_equal(a, b)
    oc.set_dim(a, 4)
    outer = oc.einsum("i;j=>ij", a, b)
    oc.infer_shapes(outer)
    assert outer.shape.output == (4, 4)
    c = oc.term("sc", batch_dims=[2])
    oc.set_dim(oc.dim_of(c, "batch", 0), 2)  # consistent: no error
    oc.set_dim(oc.dim_of(c, "output", -1), 3)
    oc.infer_shapes(c)
    assert str(c.shape) == "2|3"


def test_set_dim_result_does_not_depend_on_constraint_order() -> None:
    def build(first: bool) -> tuple[int, ...]:
        t = oc.term("ord")
        y = oc.einsum("ij=>i", t)
        j = oc.capture(y, "j")
        if first:
            oc.set_dim(j, 5)
        z = y + oc.ndarray(np.ones(2))
        if not first:
            oc.set_dim(j, 5)
        oc.infer_shapes(z)
        return t.shape.output

    assert build(True) == build(False) == (2, 5)


def test_contradicting_constraints_are_located_shape_errors() -> None:
    x = oc.ndarray(np.ones((3, 4)))
    with pytest.raises(oc.ShapeError, match="5 vs 4") as e:
        oc.set_dim(x, 5)
    assert Path(__file__).name in str(e.value)
    p, q = oc.term("cp", output_dims=[2]), oc.term("cq", output_dims=[3])
    with pytest.raises(oc.ShapeError):
        oc.set_equal(p, q)
    with pytest.raises(oc.ArgumentError, match="non-negative int"):
        oc.set_dim(p, -1)
    with pytest.raises(oc.ArgumentError, match="DimRef"):
        oc.set_dim("x", 3)  # type: ignore[arg-type]
