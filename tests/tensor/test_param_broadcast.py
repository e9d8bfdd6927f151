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

