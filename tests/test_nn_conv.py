"""oc.nn.conv2d / max_pool2d / avg_pool2d from the user's side: values and PyTorch-convention
shapes vs NumPy references, gradients vs float64 central differences (check_grads) and vs
the NumPy closed form for the kernel and bias."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import ocannl_ast as oc


def _data(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape)


def _patches(x: np.ndarray, k: int, stride: int, pad: bool, fill: float = 0.0) -> np.ndarray:
    """x: (b, h, w, c) -> (b, oh, ow, k, k, c), PyTorch padding split for "same"."""
    b, h, w, c = x.shape
    if pad:
        left = (k - 1) // 2
        x = np.pad(x, ((0, 0), (left, k - 1 - left), (left, k - 1 - left), (0, 0)),
                   constant_values=fill)
        oh, ow = h // stride, w // stride
    else:
        oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    out = np.empty((b, oh, ow, k, k, c))
    for i, j in itertools.product(range(oh), range(ow)):
        out[:, i, j] = x[:, i * stride:i * stride + k, j * stride:j * stride + k, :]
    return out


def conv2d_ref(x: np.ndarray, w: np.ndarray, bias: np.ndarray, stride: int,
               pad: bool) -> np.ndarray:
    """w: (kh, kw, in_ch, out_ch)."""
    k = w.shape[0]
    return np.einsum("bijxyc,xyco->bijo", _patches(x, k, stride, pad), w) + bias


def pool_ref(x: np.ndarray, k: int, stride: int, op: str) -> np.ndarray:
    p = _patches(x, k, stride, False)
    return p.max(axis=(3, 4)) if op == "max" else p.mean(axis=(3, 4))


CASES = list(itertools.product([1, 2], ["same", "valid"], [3, 2]))


@pytest.mark.parametrize(("stride", "padding", "k"), CASES)
def test_conv2d_values_and_shapes(stride: int, padding: str, k: int) -> None:
    pad = padding == "same"
    h = 8 if pad else stride * 2 + k
    w_ = 6 if pad else stride * 3 + k
    xs = _data(stride + 10 * k + pad, (2, h, w_, 3))
    y = oc.nn.conv2d(4, k, stride=stride, padding=padding)(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    kernel, bias = y.params()
    assert kernel.shape.input == (k, k, 3) and kernel.shape.output == (4,)
    assert bias.shape.output == (4,)
    wk = np.transpose(ctx.get(kernel), (1, 2, 3, 0))  # (oc, kh, kw, ic) -> (kh, kw, ic, oc)
    want = conv2d_ref(xs, wk, ctx.get(bias), stride, pad)
    oh, ow = (h // stride, w_ // stride) if pad else ((h - k) // stride + 1,
                                                      (w_ - k) // stride + 1)
    assert got.shape == want.shape == (2, oh, ow, 4)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_conv2d_rectangular_kernel_and_stride() -> None:
    xs = _data(3, (1, 7, 8, 2))
    y = oc.nn.conv2d(3, (3, 2), stride=(2, 3), padding="valid")(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    kernel, bias = y.params()
    wk = np.transpose(ctx.get(kernel), (1, 2, 3, 0))
    p = np.empty((1, 3, 3, 3, 2, 2))  # (b, oh, ow, kh, kw, c)
    for i, j in itertools.product(range(3), range(3)):
        p[:, i, j] = xs[:, 2 * i:2 * i + 3, 3 * j:3 * j + 2, :]
    want = np.einsum("bijxyc,xyco->bijo", p, wk) + ctx.get(bias)
    assert got.shape == (1, 3, 3, 3)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_conv2d_shares_params_across_uses() -> None:
    layer = oc.nn.conv2d(2, 3)
    x = oc.ndarray(_data(4, (1, 4, 4, 2)), batch_axes=1)
    y1, y2 = layer(x), layer(x)
    assert {p.id for p in y1.params()} == {p.id for p in y2.params()}
    assert len((y1 + y2).params()) == 2


@pytest.mark.parametrize(("op", "k", "stride"),
                         list(itertools.product(["max", "avg"], [2, 3], [None, 1, 2])))
def test_pool2d_values_and_shapes(op: str, k: int, stride: int | None) -> None:
    s = k if stride is None else stride
    h, w_ = s * 2 + k, s * 3 + k
    xs = _data(k * 7 + s, (2, h, w_, 3)) - 3.0
    layer = oc.nn.max_pool2d(k, stride=stride) if op == "max" else \
        oc.nn.avg_pool2d(k, stride=stride)
    got = oc.eval(layer(oc.ndarray(xs, batch_axes=1)), precision="float64")
    want = pool_ref(xs, k, s, op)
    assert got.shape == want.shape == (2, 3, 4, 3)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize(("stride", "padding"), [(1, "same"), (2, "same"), (1, "valid"),
                                                 (2, "valid")])
def test_conv2d_input_grads(stride: int, padding: str) -> None:
    h = 4 if padding == "same" else 5
    n = h // stride if padding == "same" else (h - 3) // stride + 1
    coef = oc.ndarray(_data(30 + stride, (n, n, 2)))
    layer = oc.nn.conv2d(2, 3, stride=stride, padding=padding)
    oc.testing.check_grads(lambda x: oc.einsum("i,j,o;i,j,o=>", layer(x), coef),
                           [_data(31 + stride, (h, h, 2))])


@pytest.mark.parametrize(("stride", "padding"), [(1, "same"), (2, "valid")])
def test_conv2d_kernel_and_bias_grads(stride: int, padding: str) -> None:
    pad = padding == "same"
    xs = _data(40 + stride, (2, 4 if pad else 5, 4 if pad else 5, 2))
    y = oc.nn.conv2d(3, 3, stride=stride, padding=padding)(oc.ndarray(xs, batch_axes=1))
    c = _data(41, (2, *y_spatial(xs.shape[1], stride, pad), 3))
    loss = oc.einsum("..b..|i,j,o;..b..|i,j,o=>", y, oc.ndarray(c, batch_axes=1))
    kernel, bias = y.params()
    _, (gk, gb) = oc.value_and_grad(loss, [kernel, bias], precision="float64")
    want_k = np.einsum("bijxyc,bijo->oxyc", _patches(xs, 3, stride, pad), c)
    np.testing.assert_allclose(gk, want_k, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb, c.sum(axis=(0, 1, 2)), rtol=1e-10, atol=1e-12)


def y_spatial(h: int, stride: int, pad: bool) -> tuple[int, int]:
    n = h // stride if pad else (h - 3) // stride + 1
    return n, n


@pytest.mark.parametrize("op", ["max", "avg"])
def test_pool2d_grads(op: str) -> None:
    layer = oc.nn.max_pool2d(2) if op == "max" else oc.nn.avg_pool2d(3, stride=1)
    coef = oc.ndarray(_data(50, (2, 2, 2)))  # both layers: 4x4 -> 2x2
    oc.testing.check_grads(lambda x: oc.einsum("i,j,c;i,j,c=>", layer(x), coef),
                           [_data(51, (4, 4, 2))])


@pytest.mark.parametrize("bad", [
    lambda: oc.nn.conv2d(0, 3), lambda: oc.nn.conv2d(2, 3, padding="full"),
    lambda: oc.nn.conv2d(2, (3, 3, 3)), lambda: oc.nn.conv2d(2, 3, stride=0),
    lambda: oc.nn.max_pool2d(0), lambda: oc.nn.avg_pool2d(2, stride=1.5)])
def test_bad_arguments_are_argument_errors(bad) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(oc.OcannlError):
        bad()


def test_pool_window_that_does_not_tile_is_a_shape_error() -> None:
    with pytest.raises(oc.ShapeError):
        oc.eval(oc.nn.max_pool2d(2)(oc.ndarray(np.ones((1, 5, 4, 1)), batch_axes=1)))


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv2d_one_input_channel(padding: str) -> None:
    """A 1-channel image (grayscale) gives the kernel one input channel: the size-1 channel
    axis of x is the only use that bounds it, and it closes to 1 (was a ShapeError)."""
    xs = _data(7, (2, 6, 6, 1))
    y = oc.nn.conv2d(3, 3, padding=padding)(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    kernel, bias = y.params()
    oc.testing.assert_shape(kernel, "3,3,1->3")
    wk = np.transpose(ctx.get(kernel), (1, 2, 3, 0))  # (oc, kh, kw, ic) -> (kh, kw, ic, oc)
    want = conv2d_ref(xs, wk, ctx.get(bias), 1, padding == "same")
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_einsum_param_axis_bounded_only_by_size_one_operand() -> None:
    """An einsum label shared by a size-1 data axis and an undetermined param axis closes
    the param axis to 1, as `@` does; values match numpy.einsum."""
    xs = _data(3, (2, 1))
    w = oc.param("w1c", output_dims=[4])
    y = oc.einsum("b|c; c->o => b|o", oc.ndarray(xs, batch_axes=1), w)
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    oc.testing.assert_shape(w, "1->4")
    np.testing.assert_allclose(got, np.einsum("bc,oc->bo", xs, ctx.get(w)), rtol=1e-12)


@pytest.mark.parametrize("channels", [1, 3])
def test_conv_net_step_grads_vs_numpy_and_no_window_buffer(channels: int) -> None:
    """A conv net layer at a size that reaches the contraction kernel (batch 16 of 8x8
    images): the window of ones is folded away (no window buffer is read; max-pool's
    -0.0 window too), the kernel gradient's product puts the 16 output channels in the
    kernel's vector lanes; values and gradients against NumPy in float64."""
    xs = _data(60 + channels, (16, 8, 8, channels))
    y = oc.nn.conv2d(16, 3, padding="same")(oc.ndarray(xs, batch_axes=1))
    pooled = oc.nn.max_pool2d(2)(oc.relu(y))
    c = _data(61, (16, 4, 4, 16))
    loss = oc.einsum("..b..|i,j,o;..b..|i,j,o=>", pooled, oc.ndarray(c, batch_axes=1))
    kernel, bias = y.params()
    src = oc.render(oc.grad_update(loss), precision="float64")
    assert "window" not in src.split("int routine(")[0].split("*/", 1)[1].replace(
        "/* constant: window", ""), "a window buffer is still read"
    assert any("contraction kernel: kernel_grad" in ln and "N 16," in ln
               for ln in src.splitlines()), "the channels are not the kernel's columns"
    ctx = oc.Context(precision="float64")
    _, (gk, gb) = oc.value_and_grad(loss, [kernel, bias], ctx=ctx)
    wk = np.transpose(ctx.get(kernel), (1, 2, 3, 0))  # (oc, kh, kw, ic) -> (kh, kw, ic, oc)
    yv = conv2d_ref(xs, wk, ctx.get(bias), 1, True)
    r = np.maximum(yv, 0.0).reshape(16, 4, 2, 4, 2, 16)
    pooled_ref = r.max(axis=(2, 4))
    np.testing.assert_allclose(ctx.get(pooled), pooled_ref, rtol=1e-12, atol=1e-12)
    # d loss / d y: c at each window's maximum (no ties in random data), through the relu
    hit = (r == pooled_ref[:, :, None, :, None, :]) & (r > 0)
    dy = (hit * c[:, :, None, :, None, :]).reshape(16, 8, 8, 16)
    want_k = np.einsum("bijxyc,bijo->oxyc", _patches(xs, 3, 1, True), dy)
    np.testing.assert_allclose(gk, want_k, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb, dy.sum(axis=(0, 1, 2)), rtol=1e-10, atol=1e-12)


def test_max_pool_keeps_negative_zero_as_numpy() -> None:
    """The max-pool window adds -0.0 (exact): a window of -0.0 values pools to -0.0, as
    NumPy's max (adding +0.0 would give +0.0)."""
    xs = np.full((1, 2, 2, 1), -0.0)
    got = oc.eval(oc.nn.max_pool2d(2)(oc.ndarray(xs, batch_axes=1)))
    assert got.shape == (1, 1, 1, 1) and got[0, 0, 0, 0] == 0.0
    assert np.signbit(got[0, 0, 0, 0]) == np.signbit(xs.max())


@pytest.mark.parametrize("channels", [1, 3, 8])
def test_conv_kernel_grad_same_bits_whichever_side_is_the_kernels_columns(
        channels: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel gradient's product with the output channels as the kernel's columns
    (`c_contraction._swap`) or the window cells (as before): the same products summed in
    the same order, so the same float32 bits."""
    from ocannl_ast.backends import c_contraction

    xs = _data(70 + channels, (16, 8, 8, channels)).astype(np.float32)
    c = _data(71, (16, 8, 8, 16)).astype(np.float32)

    def kernel_grad() -> tuple[bytes, str]:
        y = oc.nn.conv2d(16, 3, padding="same")(oc.ndarray(xs, batch_axes=1))
        loss = oc.einsum("..b..|i,j,o;..b..|i,j,o=>", y, oc.ndarray(c, batch_axes=1))
        kernel, _ = y.params()
        src = oc.render(oc.grad_update(loss), precision="float32")
        line = next(ln for ln in src.splitlines() if "contraction kernel: kernel_grad" in ln)
        _, (gk,) = oc.value_and_grad(loss, [kernel], precision="float32")
        return gk.tobytes(), line

    swapped, line = kernel_grad()
    assert "N 16," in line
    monkeypatch.setattr(c_contraction, "SWAP_MIN_K", 1 << 40)
    plain, line = kernel_grad()
    assert "M 16," in line
    assert swapped == plain


def test_conv2d_on_an_image_without_its_batch_axes_says_what_it_takes() -> None:
    x = oc.ndarray(np.ones((2, 8, 8, 3)))  # batch_axes forgotten: 2,8,8,3 are output axes
    with pytest.raises(oc.ShapeError, match=r"conv2d: x must be batch\|height,width,channels"):
        oc.nn.conv2d(4, 3)(x)


def test_flatten_after_a_one_channel_conv_matches_numpy() -> None:
    """conv2d(1, 3)'s output channel is a size-1 axis computed from size-1 axes: known only
    once the shape closes; flatten used to refuse it ("not known yet")."""
    rng = np.random.default_rng(4)
    img = oc.ndarray(rng.normal(size=(2, 4, 4, 3)), batch_axes=1)
    h = oc.nn.conv2d(1, 3)(img)
    flat = oc.nn.flatten(h)
    ctx = oc.Context(precision="float64")
    got_h, got = ctx.eval(h), ctx.eval(flat)
    assert got.shape == (2, 16)
    np.testing.assert_array_equal(got, got_h.reshape(2, 16))


@pytest.mark.parametrize("pool", ["max_pool2d", "avg_pool2d"])
def test_pooling_an_image_without_its_batch_axes_says_what_it_takes(pool: str) -> None:
    x = oc.ndarray(np.ones((2, 8, 8, 3)))
    with pytest.raises(oc.ShapeError, match=rf"{pool}: x must be batch\|height,width,channels"):
        getattr(oc.nn, pool)(2)(x)
