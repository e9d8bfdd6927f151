"""Fetch ops as public tensors (tensor/ops/fetch.py): constant_fill, range_over_offsets,
embed_self_id, embed_symbol, embed_dim; values vs NumPy inside expressions in float32 and
float64, shapes inferred from use, a training step keyed by the step number, and bad
arguments as located errors."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

PRECISIONS = ["float32", "float64"]
HERE = "test_fetch_ops.py"


def _eval(t: oc.Tensor, precision: str) -> np.ndarray:
    return oc.eval(t, ctx=oc.Context(precision=precision))


def _dt(precision: str) -> type:
    return np.float32 if precision == "float32" else np.float64


# ---- constant_fill -------------------------------------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
def test_constant_fill_in_expression(precision: str) -> None:
    vals = np.array([0.5, -1.25, 3.0], dtype=_dt(precision))
    out = _eval(oc.constant_fill(vals.tolist()) * 2.0 + oc.ndarray([1.0, 2.0, 3.0]), precision)
    np.testing.assert_array_equal(out, vals * 2 + np.array([1, 2, 3], dtype=_dt(precision)))


@pytest.mark.parametrize("precision", PRECISIONS)
def test_constant_fill_layout_like_ndarray(precision: str) -> None:
    lit = oc.batch([[(1.0, 2.0, 3.0), (4.0, 5.0, 6.0)], [(7.0, 8.0, 9.0), (0.5, 0.25, -1.0)]])
    c, n = oc.constant_fill(lit), oc.ndarray(lit)
    out = _eval(c - n, precision)
    np.testing.assert_array_equal(out, np.zeros((2, 2, 3)))
    assert (c.shape.batch, c.shape.output, c.shape.input) == ((2,), (2,), (3,))
    np.testing.assert_array_equal(_eval(c + 0.0, precision), _eval(n + 0.0, precision))


def test_constant_fill_axes_keywords_and_scalar() -> None:
    arr = np.arange(12.0).reshape(2, 3, 2)
    c = oc.constant_fill(arr, batch_axes=1, input_axes=1)
    np.testing.assert_array_equal(oc.eval(c * 1.0), arr)
    assert (c.shape.batch, c.shape.output, c.shape.input) == ((2,), (3,), (2,))
    np.testing.assert_array_equal(oc.eval(oc.constant_fill([7.5]) + 0.0), [7.5])


def test_constant_fill_is_unrolled_code_not_held_data() -> None:
    c = oc.constant_fill([1.0, 2.0])
    assert not c.is_held_out and c.init_value is None
    text = oc.Context().lower_code((c * 1.0).forward)[1]
    from ocannl_ast.lowering.asgn_print import print_asgn
    assert "constant_values [1.0, 2.0]" in print_asgn(text)


@pytest.mark.parametrize("bad", [None, "abc", [[1.0, 2.0], [3.0]], [1.0, "x"]])
def test_constant_fill_bad_values_located(bad: object) -> None:
    with pytest.raises(oc.OcannlError) as e:
        oc.constant_fill(bad)
    assert HERE in str(e.value)


def test_constant_fill_too_large_located() -> None:
    with pytest.raises(oc.ArgumentError, match="oc.ndarray") as e:
        oc.constant_fill(np.zeros(5000))
    assert HERE in str(e.value)


# ---- range_over_offsets --------------------------------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
def test_range_over_offsets_given_dims(precision: str) -> None:
    r = oc.range_over_offsets(batch_dims=[2], output_dims=[3], input_dims=[4])
    out = _eval(r * 0.5, precision)
    np.testing.assert_array_equal(out, np.arange(24, dtype=_dt(precision)).reshape(2, 3, 4) * 0.5)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_range_over_offsets_shape_inferred_from_use(precision: str) -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    r = oc.range_over_offsets()
    out = _eval(oc.ndarray(x) + r, precision)
    np.testing.assert_array_equal(out, x + np.arange(6).reshape(2, 3))
    assert r.shape.output == (2, 3)


def test_range_over_offsets_partial_dims_inferred() -> None:
    r = oc.range_over_offsets(input_dims=[2])
    out = oc.eval(oc.einsum("i->o;i=>o", r, oc.ndarray([1.0, 10.0])))
    n_out = r.shape.output
    ref = np.arange(np.prod(n_out) * 2).reshape(*n_out, 2) @ np.array([1.0, 10.0])
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("kw", [{"output_dims": [-1]}, {"input_dims": "3"},
                                {"batch_dims": [2.5]}, {"label": 3}])
def test_range_over_offsets_bad_args_located(kw: dict[str, object]) -> None:
    with pytest.raises(oc.OcannlError) as e:
        oc.range_over_offsets(**kw)  # type: ignore[arg-type]
    assert HERE in str(e.value)


def test_oc_range_still_matches() -> None:
    np.testing.assert_array_equal(oc.eval(oc.range(5) * 1.0), np.arange(5.0))


# ---- embed_self_id -------------------------------------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
def test_embed_self_id_is_tensor_id(precision: str) -> None:
    a, b = oc.embed_self_id(), oc.embed_self_id()
    out = _eval(a * 10.0 + b, precision)
    np.testing.assert_array_equal(out, [a.id * 10.0 + b.id])
    assert a.id != b.id
    np.testing.assert_array_equal(_eval(a + 0.0, precision), [a.id])  # stable across routines


def test_embed_self_id_bad_label_located() -> None:
    with pytest.raises(oc.ArgumentError) as e:
        oc.embed_self_id(label="")
    assert HERE in str(e.value)


# ---- embed_symbol --------------------------------------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
def test_embed_symbol_in_expression(precision: str) -> None:
    step = oc.static_index("step")
    lr = 0.1 / (1.0 + oc.embed_symbol(step))
    ctx = oc.Context(precision=precision)
    routine = ctx.compile(lr.forward)
    assert routine.static_names == ["step"]
    for k in (0, 3, 7):
        routine(step=k)
        np.testing.assert_allclose(ctx.get(lr), [_dt(precision)(0.1) / (1 + k)],
                                   rtol=1e-7 if precision == "float32" else 1e-15)


def test_embed_symbol_in_training_step() -> None:
    x0, y0 = np.array([1.0, 2.0, -1.0]), np.array([2.0, 3.0, 0.5])
    w = oc.param("w_fetch_sym", init=np.array([0.3]))
    x, y = oc.ndarray(x0), oc.ndarray(y0)
    d = w * x - y
    loss = oc.einsum("i;i=>", d, d)
    step = oc.static_index("step")
    lr = 0.05 / (1.0 + oc.embed_symbol(step))
    ctx = oc.Context(precision="float64")
    train = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=lr)])
    ref = 0.3
    for k in range(4):
        train(step=k)
        ref -= 0.05 / (1 + k) * np.sum(2 * (ref * x0 - y0) * x0)
        np.testing.assert_allclose(ctx.get(w), [ref], rtol=1e-12)


def test_embed_symbol_missing_static_argument() -> None:
    step = oc.static_index("step")
    routine = oc.Context().compile((oc.embed_symbol(step) * 1.0).forward)
    with pytest.raises(oc.ArgumentError, match="step"):
        routine()


@pytest.mark.parametrize("bad", ["step", 3, None])
def test_embed_symbol_bad_index_located(bad: object) -> None:
    with pytest.raises(oc.ArgumentError, match="static_index") as e:
        oc.embed_symbol(bad)  # type: ignore[arg-type]
    assert HERE in str(e.value)


# ---- embed_dim -----------------------------------------------------------------------------

@pytest.mark.parametrize("precision", PRECISIONS)
def test_embed_dim_mean(precision: str) -> None:
    x0 = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    x = oc.ndarray(x0)
    out = _eval(oc.einsum("i=>", x) / oc.embed_dim(x), precision)
    np.testing.assert_allclose(out, [x0.mean()], rtol=1e-7)


@pytest.mark.parametrize("kind,axis,expect", [("batch", 0, 2), ("output", 0, 3),
                                              ("output", -1, 4), ("input", -1, 5)])
def test_embed_dim_rows_and_axes(kind: str, axis: int, expect: int) -> None:
    x = oc.term("x_dims", batch_dims=[2], output_dims=[3, 4], input_dims=[5])
    np.testing.assert_array_equal(oc.eval(oc.embed_dim(x, kind, axis) * 1.0), [expect])


def test_embed_dim_resolved_after_shape_closing() -> None:
    # x's output dim is unknown when embed_dim is built; a later use fixes it to 6
    x = oc.term("x_later")
    n = oc.embed_dim(x)
    y = oc.einsum("i;i=>i", x, oc.ndarray(np.ones(6)))
    assert n.dims() == (1,)
    np.testing.assert_array_equal(oc.eval(n + 0.0), [6.0])
    assert y.shape.output == (6,)


def test_embed_dim_missing_axis_is_located_shape_error() -> None:
    x = oc.term("x_noin", output_dims=[3], input_dims=[])
    n = oc.embed_dim(x, "input", 0)  # the span points here
    with pytest.raises(oc.ShapeError, match="no axis 0") as e:
        oc.eval(n * 1.0)
    assert HERE in str(e.value) and "embed_dim(x" in str(e.value)


@pytest.mark.parametrize("args", [(3.0,), ("x",), (None, "output")])
def test_embed_dim_bad_tensor_located(args: tuple[object, ...]) -> None:
    with pytest.raises(oc.ArgumentError) as e:
        oc.embed_dim(*args)  # type: ignore[arg-type]
    assert HERE in str(e.value)


@pytest.mark.parametrize("kw", [{"kind": "outputs"}, {"kind": 1}, {"axis": 1.0},
                                {"axis": "0"}])
def test_embed_dim_bad_kind_axis_located(kw: dict[str, object]) -> None:
    with pytest.raises(oc.ArgumentError) as e:
        oc.embed_dim(oc.ndarray([1.0]), **kw)  # type: ignore[arg-type]
    assert HERE in str(e.value)


# ---- concatenated index ----------------------------------------------------------------------

def test_fetch_tensor_under_contradictory_concatenated_index_is_located() -> None:
    """The vectorized op (uint4x32_to_prec_uniform) has no public builder and takes no
    index spec at all, so the closest reachable form is tested: a fetch tensor read
    through a concatenated (`^`) index whose component sizes contradict."""
    r = oc.range_over_offsets(output_dims=[1])
    with pytest.raises(oc.ShapeError, match="concatenated") as e:
        oc.einsum("a^b;a=>a", r, oc.ndarray([1.0, 2.0]))
    assert HERE in str(e.value)


def test_batch_slice_of_range_over_offsets() -> None:
    # slicing (tensor.batch_slice) composes with the fetch ops
    b = oc.static_index("b")
    r = oc.range_over_offsets(batch_dims=[3], output_dims=[2])
    s = r.batch_slice(b) * 1.0
    ctx = oc.Context()
    routine = ctx.compile(s.forward)
    for k in range(3):
        routine(b=k)
        np.testing.assert_array_equal(ctx.get(s), [2.0 * k, 2.0 * k + 1])
