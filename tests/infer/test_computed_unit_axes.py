"""Issue 21 item 4: a size-1 axis computed by an operation means what data of size 1
means: concatenations, convolutions, layer norm and attention give the same answer whether
a size-1 axis came from an ndarray or from `t * 1.0`."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


@pytest.mark.parametrize("computed", [False, True])
def test_concat_of_a_concat_with_a_computed_unit(computed: bool) -> None:
    three = oc.ndarray([3.0]) * 1.0 if computed else oc.ndarray([3.0])
    xy = oc.concat("a;b=>a^b", oc.ndarray([1.0]), three)
    np.testing.assert_array_equal(oc.eval(oc.concat("e=>1^e", xy)), [0.0, 1.0, 3.0])


def test_concat_pair_alone() -> None:
    xy = oc.concat("a;b=>a^b", oc.ndarray([1.0]), oc.ndarray([3.0]) * 1.0)
    np.testing.assert_array_equal(oc.eval(xy), [1.0, 3.0])


@pytest.mark.parametrize("computed", [False, True])
def test_dropping_the_only_cell_leaves_nothing(computed: bool) -> None:
    t = oc.ndarray([3.0]) * 1.0 if computed else oc.ndarray([3.0])
    got = oc.eval(oc.concat("1^e=>e", t))
    assert got.shape == (0,)


def test_conv_after_a_one_channel_conv() -> None:
    rng = np.random.default_rng(0)
    x = oc.ndarray(rng.random((2, 5, 5, 3)), batch_axes=1)
    first, second = oc.nn.conv2d(1, 3), oc.nn.conv2d(2, 3)
    mid = first(x)
    out = second(mid)
    got = oc.eval(out)
    assert got.shape == (2, 5, 5, 2)
    # the same second layer on the first layer's values as data gives the same numbers
    as_data = oc.ndarray(oc.eval(mid), batch_axes=1)
    np.testing.assert_allclose(oc.eval(second(as_data)), got, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", [
    lambda: oc.nn.conv2d(2, 3),
    lambda: oc.nn.layer_norm(),
    lambda: oc.nn.linear(2),
])
@pytest.mark.parametrize("computed_first", [False, True])
def test_layers_on_data_and_computed_one_feature_inputs_agree(make, computed_first: bool
                                                              ) -> None:
    rng = np.random.default_rng(1)
    data = rng.random((2, 5, 5, 1)).astype(np.float32)
    layer = make()
    if computed_first:  # the layer's params are shaped by the computed input
        computed = oc.eval(layer(oc.ndarray(data, batch_axes=1) * 1.0))
        from_data = oc.eval(layer(oc.ndarray(data, batch_axes=1)))
    else:
        from_data = oc.eval(layer(oc.ndarray(data, batch_axes=1)))
        computed = oc.eval(layer(oc.ndarray(data, batch_axes=1) * 1.0))
    assert from_data.shape == computed.shape
    np.testing.assert_allclose(computed, from_data, rtol=1e-5, atol=1e-6)


def test_layer_norm_after_linear_one() -> None:
    rng = np.random.default_rng(2)
    x = oc.ndarray(rng.random((2, 5, 5, 3)), batch_axes=1)
    got = oc.eval(oc.nn.layer_norm()(oc.nn.linear(1)(x)))
    # linear acts on the last axis: one feature per position, centred to 0, so the output
    # is the bias (initialised to 0)
    np.testing.assert_allclose(got, np.zeros((2, 5, 5, 1)), atol=1e-6)


def test_attention_on_a_computed_one_feature_input() -> None:
    rng = np.random.default_rng(3)
    data = rng.random((2, 4, 1)).astype(np.float32)
    layer = oc.nn.multi_head_attention(1, 2)
    from_data = oc.eval(layer(oc.ndarray(data, batch_axes=1)))
    computed = oc.eval(layer(oc.ndarray(data, batch_axes=1) * 1.0))
    assert computed.shape == (2, 4, 1)
    np.testing.assert_allclose(computed, from_data, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("computed", [False, True])
def test_param_above_an_affine_of_a_computed_unit(computed: bool) -> None:
    """`2*h+w` over an axis that is a computed size-1 (open until closing, `h >= 1`) has a
    size known once `h` closes: the parameter above it is determined by that use, not "a
    dimension is not determined by any use" (seen as flatten of B|1,1,C into a linear)."""
    xs = np.random.default_rng(3).normal(size=(3, 1, 2))
    x = oc.ndarray(xs, batch_axes=1)
    x = x * 1.0 if computed else x
    merged = oc.einsum("..b..|h,w => ..b..|2*h+w", x)  # 3|2, as xs.reshape(3, 2)
    w = oc.param("w", output_dims=[4])
    y = oc.einsum("..b..|f; f->o => ..b..|o", merged, w)
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    np.testing.assert_array_equal(ctx.eval(merged), xs.reshape(3, 2))
    np.testing.assert_allclose(got, xs.reshape(3, 2) @ ctx.get(w).T, rtol=1e-12)
