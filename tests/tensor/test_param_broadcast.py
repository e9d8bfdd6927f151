"""A parameter is never broadcast between uses of different sizes: a layer applied to 3-
and 8-channel inputs used to close its kernel's input channels to 1 (the one size under
both in the broadcast order), and the model silently summed its input channels with one
shared weight. Now a ShapeError names the parameter and the layer's line (found by a
user-side check against PyTorch, which raises there too)."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def _x(*shape: int) -> oc.Tensor:
    return oc.ndarray(np.random.default_rng(0).normal(size=shape), batch_axes=1)


def test_a_conv_layer_reused_on_a_different_channel_count_is_a_shape_error() -> None:
    conv = oc.nn.conv2d(8, 3)  # the line the error points at
    h = conv(oc.relu(conv(_x(2, 6, 6, 3))))
    with pytest.raises(oc.ShapeError, match=r"parameter 'kernel'.*sizes 3 and 8") as e:
        oc.eval(h)
    assert "test_param_broadcast.py" in str(e.value)


def test_a_linear_layer_on_two_feature_sizes_is_a_shape_error() -> None:
    lin = oc.nn.linear(1)
    a, b = lin(_x(4, 3)), lin(_x(4, 5))
    with pytest.raises(oc.ShapeError, match=r"parameter 'w'.*sizes 3 and 5"):
        oc.eval(a + oc.einsum("b|o=>b|o", b))


def test_one_layer_per_size_and_a_shared_layer_on_one_size_still_work() -> None:
    l3, l5, shared = oc.nn.linear(2), oc.nn.linear(2), oc.nn.linear(2)
    x3, y3 = _x(4, 3), _x(4, 3)
    out = l3(x3) + l5(_x(4, 5)) + shared(x3) + shared(y3)
    assert oc.eval(out).shape == (4, 2)



# ---- a size-1 input against a parameter's summed-over axis ------------------------------


def test_a_conv_layer_on_rgb_then_greyscale_is_a_shape_error() -> None:
    """Found by a user-side check: the greyscale batch used to give the conv of the grey
    image copied into all 3 channels (every kernel channel times the one channel)."""
    conv = oc.nn.conv2d(2, 3)
    rgb = conv(_x(2, 5, 5, 3))
    assert oc.eval(rgb).shape == (2, 5, 5, 2)
    grey = conv(_x(2, 5, 5, 1))
    with pytest.raises(oc.ShapeError, match=r"size 1 on the axis that parameter 'kernel' "
                                            r"sums over with size 3") as e:
        oc.eval(grey)
    assert "test_param_broadcast.py" in str(e.value)


@pytest.mark.parametrize("first", [True, False])
def test_a_closed_linear_on_one_feature_data_is_a_shape_error(first: bool) -> None:
    lin = oc.nn.linear(4)
    wide, narrow = _x(2, 3), _x(2, 1)
    if first:
        oc.eval(lin(wide))
        y = lin(narrow)
    else:
        y = lin(narrow) + 0.0 * oc.einsum("..b..|o => ..b..|o", lin(wide))
    with pytest.raises(oc.ShapeError, match=r"parameter 'w' sums over with size 3"):
        oc.eval(y)


def test_an_explicit_weight_against_one_feature_is_a_shape_error() -> None:
    w = oc.param("w_explicit", output_dims=[2], input_dims=[3])
    with pytest.raises(oc.ShapeError, match=r"'w_explicit' sums over with size 3"):
        oc.eval(w @ _x(4, 1))


def test_pointwise_and_one_feature_layers_still_broadcast() -> None:
    """Allowed: a parameter closed from a 1-feature use (1 -> 4), a number times a
    parameter, a per-example scalar times a parameter vector (pointwise), a sum of a
    parameter's axis with no data on it."""
    x1 = np.random.default_rng(1).normal(size=(5, 1))
    lin = oc.nn.linear(4)
    y = oc.Context(precision="float64")
    out = y.eval(lin(oc.ndarray(x1, batch_axes=1)))
    w, b = (y.get(p) for p in lin(oc.ndarray(x1, batch_axes=1)).params())
    np.testing.assert_allclose(out, x1 @ w.T + b, rtol=1e-12)
    freq = oc.param("freq", output_dims=[3], init=np.array([1.0, 2.0, 3.0]))
    t = oc.ndarray(x1, batch_axes=1)
    np.testing.assert_allclose(oc.eval(t * freq), x1 * [1.0, 2.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(oc.eval(0.5 * freq), [0.5, 1.0, 1.5])
    np.testing.assert_allclose(oc.eval(oc.einsum("i => 0", freq)), [6.0])
