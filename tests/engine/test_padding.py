"""Padded convolutions and pooling (seed 001 "Padding"): values against NumPy references
(PyTorch conventions), gradients against float64 central differences, margins shared by
readers of different widths, located errors. The loop verifier (OCANNL_AST_CHECK=1) proves
every read inside the padded buffers."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest

import ocannl_ast as oc

HERE = os.path.basename(__file__)


def conv1d_ref(x: np.ndarray, w: np.ndarray, stride: int, dil: int, pad: bool) -> np.ndarray:
    span = 1 + (len(w) - 1) * dil
    left = (span - 1) // 2 if pad else 0
    xp = np.pad(x, (left, span)) if pad else x
    n_out = len(x) // stride if pad else (len(x) - span) // stride + 1
    return np.array([sum(xp[stride * o + dil * k] * w[k] for k in range(len(w)))
                     for o in range(n_out)])


def conv2d_ref(x: np.ndarray, w: np.ndarray, stride: int, pad: bool) -> np.ndarray:
    """x: (H, W, IC), w: (KH, KW, IC, OC) -> (OH, OW, OC), PyTorch 'same'/'valid'."""
    kh, kw = w.shape[:2]
    if pad:
        x = np.pad(x, (((kh - 1) // 2, kh // 2), ((kw - 1) // 2, kw // 2), (0, 0)))
    oh = (x.shape[0] - kh) // stride + 1
    ow = (x.shape[1] - kw) // stride + 1
    out = np.zeros((oh, ow, w.shape[3]))
    for i, j in itertools.product(range(oh), range(ow)):
        patch = x[stride * i:stride * i + kh, stride * j:stride * j + kw, :]
        out[i, j] = np.einsum("abc,abcd->d", patch, w)
    return out


def pool_ref(x: np.ndarray, k: int, stride: int, pad: bool, op: str) -> np.ndarray:
    fill = -np.inf if op == "max" else 0.0
    left = (k - 1) // 2 if pad else 0
    xp = np.pad(x, (left, k), constant_values=fill) if pad else x
    n_out = len(x) // stride if pad else (len(x) - k) // stride + 1
    win = [xp[stride * o:stride * o + k] for o in range(n_out)]
    return np.array([w.max() if op == "max" else w.sum() for w in win])


def axis(stride: int, dil: int, pad: bool) -> str:
    return f"{stride}*o{'=' if pad else '<'}+{f'{dil}*' if dil > 1 else ''}k"


CASES = [(s, d, k, pad) for s, d, k, pad in itertools.product([1, 2], [1, 2], [1, 2, 3],
                                                                [True, False])]


@pytest.mark.parametrize(("stride", "dil", "kernel", "pad"), CASES)
def test_conv1d_matches_numpy(stride: int, dil: int, kernel: int, pad: bool) -> None:
    rng = np.random.default_rng(stride * 31 + dil * 7 + kernel + 3 * pad)
    n = 8 if pad else stride * 3 + 1 + (kernel - 1) * dil
    x, w = rng.standard_normal(n), rng.standard_normal(kernel)
    got = oc.eval(oc.einsum(f"{axis(stride, dil, pad)}; k => o", oc.ndarray(x), oc.ndarray(w)),
                  precision="float64")
    np.testing.assert_allclose(got, conv1d_ref(x, w, stride, dil, pad), rtol=1e-12)


@pytest.mark.parametrize(("stride", "pad", "k"), [(1, True, 3), (2, True, 3), (1, False, 3),
                                                  (2, False, 3), (1, True, 2), (2, True, 5)])
def test_conv2d_pytorch_shapes_and_values(stride: int, pad: bool, k: int) -> None:
    rng = np.random.default_rng(stride + 10 * k + pad)
    h = 8 if pad else stride * 2 + k
    x, w = rng.standard_normal((h, h, 2)), rng.standard_normal((k, k, 2, 3))
    m = "=" if pad else "<"
    spec = f"{stride}*oh{m}+kh, {stride}*ow{m}+kw, ic; kh, kw, ic, oc => oh, ow, oc"
    got = oc.eval(oc.einsum(spec, oc.ndarray(x), oc.ndarray(w)), precision="float64")
    want = conv2d_ref(x, w, stride, pad)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-10)


@pytest.mark.parametrize(("op", "k", "stride", "pad"),
                         list(itertools.product(["max", "avg"], [2, 3], [1, 2], [True, False])))
def test_pooling_matches_numpy(op: str, k: int, stride: int, pad: bool) -> None:
    rng = np.random.default_rng(k * 5 + stride + pad)
    n = 8 if pad else stride * 3 + k
    x = rng.standard_normal(n) - 3.0  # negative: padded max must not see a 0 margin
    spec = f"{stride}*o{'=' if pad else '<'}+k => o"
    if op == "max":
        t = oc.einsum_max(spec, oc.ndarray(x), window={"k": k})
    else:
        t = oc.einsum(spec, oc.ndarray(x), window={"k": k}) / float(k)
    want = pool_ref(x, k, stride, pad, op) / (1.0 if op == "max" else k)
    np.testing.assert_allclose(oc.eval(t, precision="float64"), want, rtol=1e-12)


def test_pool2d_on_batched_channels() -> None:
    x = np.random.default_rng(5).standard_normal((2, 4, 6, 3))
    t = oc.einsum_max("b|2*oh<+kh, 2*ow<+kw, c => b|oh, ow, c", oc.ndarray(x, batch_axes=1),
                      window={"kh": 2, "kw": 2})
    want = x.reshape(2, 2, 2, 3, 2, 3).max(axis=(2, 4))
    np.testing.assert_allclose(oc.eval(t, precision="float64"), want, rtol=1e-12)


def numeric_grad(f, arr: np.ndarray, eps: float = 1e-6) -> np.ndarray:  # type: ignore[no-untyped-def]
    out = np.zeros_like(arr)
    for i in np.ndindex(arr.shape):
        e = np.zeros_like(arr)
        e[i] = eps
        out[i] = (f(arr + e) - f(arr - e)) / (2 * eps)
    return out


@pytest.mark.parametrize(("stride", "dil", "kernel"), [(1, 1, 3), (2, 1, 3), (1, 2, 2),
                                                       (2, 2, 3), (1, 1, 4)])
def test_padded_conv_gradients(stride: int, dil: int, kernel: int) -> None:
    rng = np.random.default_rng(stride + dil * 3 + kernel * 11)
    x0, w0 = rng.standard_normal(6), rng.standard_normal(kernel)
    tag = f"{stride}{dil}{kernel}"
    x = oc.param(f"x_padg{tag}", output_dims=[6], init=x0)
    w = oc.param(f"w_padg{tag}", output_dims=[kernel], init=w0)
    conv = oc.einsum(f"{axis(stride, dil, True)}; k => o", x, w)
    loss = oc.einsum("o=>", conv * conv)
    _, (gx, gw) = oc.value_and_grad(loss, [x, w], precision="float64")
    fx = lambda a: float((conv1d_ref(a, w0, stride, dil, True) ** 2).sum())  # noqa: E731
    fw = lambda a: float((conv1d_ref(x0, a, stride, dil, True) ** 2).sum())  # noqa: E731
    np.testing.assert_allclose(gx, numeric_grad(fx, x0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gw, numeric_grad(fw, w0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize(("op", "pad"), list(itertools.product(["max", "avg"], [True, False])))
def test_pooling_gradients(op: str, pad: bool) -> None:
    n = 8 if pad else 7
    x0 = np.random.default_rng(2 + pad).standard_normal(n) - 2.0
    x = oc.param(f"x_poolg_{op}{pad}", output_dims=[n], init=x0)
    spec = f"2*o{'=' if pad else '<'}+k => o"
    pooled = (oc.einsum_max(spec, x, window={"k": 3}) if op == "max"
              else oc.einsum(spec, x, window={"k": 3}))
    n_out = 4 if pad else 3
    coef = np.arange(1.0, n_out + 1)
    loss = oc.einsum("o; o =>", pooled, oc.ndarray(coef))
    _, (gx,) = oc.value_and_grad(loss, [x], precision="float64")
    f = lambda a: float(pool_ref(a, 3, 2, pad, op) @ coef)  # noqa: E731
    np.testing.assert_allclose(gx, numeric_grad(f, x0), rtol=1e-6, atol=1e-8)


def test_max_pool_gradient_splits_ties() -> None:
    x = oc.param("x_pool_ties", output_dims=[4], init=np.array([1.0, 1.0, 2.0, 0.5]))
    loss = oc.einsum("o =>", oc.einsum_max("2*o<+k => o", x, window={"k": 2}))
    _, (gx,) = oc.value_and_grad(loss, [x], precision="float64")
    np.testing.assert_allclose(gx, [0.5, 0.5, 1.0, 0.0])


def test_two_readers_of_different_widths_share_the_larger_margins() -> None:
    rng = np.random.default_rng(9)
    x0, w3, w5 = rng.standard_normal(7), rng.standard_normal(3), rng.standard_normal(5)
    x = oc.param("x_two_readers", output_dims=[7], init=x0)
    a = oc.einsum("o=+k; k => o", x, oc.ndarray(w3))
    b = oc.einsum("o=+k; k => o", x, oc.ndarray(w5))
    s = a + b
    ctx = oc.Context(precision="float64")
    got = ctx.eval(s)
    assert x.value.buffer(ctx.layout).dims == (11,)  # margins (2, 2): the 5-wide reader's
    np.testing.assert_allclose(ctx.get(x), x0)  # the host view is unpadded
    want = conv1d_ref(x0, w3, 1, 1, True) + conv1d_ref(x0, w5, 1, 1, True)
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_set_and_get_see_the_unpadded_values() -> None:
    x = oc.term("x_term_pad", output_dims=[5])
    ctx = oc.Context(precision="float64")
    ctx.set(x, np.arange(5.0))  # before the layout is frozen: re-laid out later
    t = oc.einsum("o=+k; k => o", x, oc.ndarray(np.ones(3)))
    got = ctx.eval(t)
    np.testing.assert_allclose(got, [1.0, 3.0, 6.0, 9.0, 7.0])
    np.testing.assert_allclose(ctx.get(x), np.arange(5.0))
    ctx.set(x, np.ones(5))
    np.testing.assert_allclose(ctx.eval(t), [2.0, 3.0, 3.0, 3.0, 2.0])


def test_interleave_and_deinterleave_with_gradients() -> None:
    a0, b0 = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    a = oc.param("a_inter", output_dims=[3], init=a0)
    b = oc.param("b_inter", output_dims=[3], init=b0)
    t = oc.einsum("i => 2*i", a) + oc.einsum("i => 2*i+1", b)
    np.testing.assert_allclose(oc.eval(t, precision="float64"), [1, 10, 2, 20, 3, 30])
    odd = oc.einsum("2*i+1 => i", t)
    np.testing.assert_allclose(oc.eval(odd, precision="float64"), b0)
    loss = oc.einsum("i; i =>", odd, oc.ndarray([1.0, 2.0, 3.0]))
    _, (ga, gb) = oc.value_and_grad(loss, [a, b], precision="float64")
    np.testing.assert_allclose(ga, 0.0)
    np.testing.assert_allclose(gb, [1.0, 2.0, 3.0])


def test_a_later_wider_reader_of_a_laid_out_tensor_is_a_located_error() -> None:
    x = oc.param("x_frozen_pad", output_dims=[6], init=1.0)
    oc.eval(oc.einsum("o=+k; k => o", x, oc.ndarray(np.ones(3))))
    wide = oc.einsum("o=+k; k => o", x, oc.ndarray(np.ones(5)))  # MARK:frozen
    with pytest.raises(oc.ShapeError) as info:
        oc.eval(wide)
    assert "padding margins" in str(info.value) and HERE in str(info.value)


def test_a_valid_window_that_does_not_tile_is_a_located_error() -> None:
    with pytest.raises(oc.ShapeError) as info:
        oc.einsum_max("2*o<+k => o", oc.ndarray(np.ones(6)), window={"k": 3})
    assert "does not fit" in str(info.value) and HERE in str(info.value)


def test_bad_window_arguments_are_errors() -> None:
    with pytest.raises(oc.ShapeError, match="does not occur"):
        oc.einsum_max("2*o<+k => o", oc.ndarray(np.ones(6)), window={"q": 2})
    with pytest.raises(oc.ShapeError, match="positive int"):
        oc.einsum_max("2*o<+k => o", oc.ndarray(np.ones(6)), window={"k": 0})


def test_render_of_a_padded_conv_shows_margins_and_resets() -> None:
    """Golden: a 2-D padded conv (3x3 kernel, stride 2) and a padded max-pool of the same
    input: the input buffer carries margins (1+1 per spatial axis), each consumer resets
    them first (0 for the sum, -inf for the max)."""
    from golden_util import assert_golden

    x = oc.ndarray(np.ones((4, 4, 2)), label="img")
    w = oc.ndarray(np.ones((3, 3, 2, 1)), label="kern")
    conv = oc.einsum("2*oh=+kh, 2*ow=+kw, ic; kh, kw, ic, oc => oh, ow, oc", x, w)
    pool = oc.einsum_max("oh=+kh, ow=+kw, c => oh, ow, c", x, window={"kh": 3, "kw": 3})
    both = oc.einsum("a, b, c; d, e, f => a, b, c, d, e, f", conv, pool)
    text = oc.render(both.forward)
    assert "margins" in text and "-INFINITY" in text.upper()
    assert_golden("padding_conv_pool.c", text)
