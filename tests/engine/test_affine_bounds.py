"""Affine indices (seed 001) never leave their buffers: valid convolutions with strides,
dilations and offsets, read and write forms, sizes inferred from either side, checked against
NumPy; inputs that do not fit are a located ShapeError (padded mode: test_padding.py). The
loop IR verifier (OCANNL_AST_CHECK=1, set for all tests) proves every index in range."""

from __future__ import annotations

import itertools
import os
import random

import numpy as np
import pytest

import ocannl_ast as oc

HERE = os.path.basename(__file__)
ALL = list(itertools.product([1, 2, 3], [1, 2], [0, 1, 2], [1, 2, 3], [1, 3]))
#: (stride, dilation, offset, kernel, outputs): a fixed sample (each case compiles C) plus
#: the corners: largest offset with stride 1, single output, single-tap kernel
COMBOS = sorted(set(random.Random(1).sample(ALL, 20)
                    + [(1, 1, 2, 3, 3), (3, 2, 2, 3, 1), (2, 1, 1, 1, 3), (1, 2, 0, 3, 1)]))


def spec_axis(stride: int, dil: int, off: int) -> str:
    dil_txt = f"{dil}*" if dil != 1 else ""
    off_txt = f"+{off}" if off else ""
    return f"{stride}*o<{off_txt}+{dil_txt}k"


def ref_read(x: np.ndarray, w: np.ndarray, stride: int, dil: int, off: int,
             n_out: int) -> np.ndarray:
    return np.array([sum(x[stride * o + off + dil * k] * w[k] for k in range(len(w)))
                     for o in range(n_out)])


def in_size(stride: int, dil: int, off: int, kernel: int, n_out: int) -> int:
    return stride * (n_out - 1) + off + dil * (kernel - 1) + 1


@pytest.mark.parametrize(("stride", "dil", "off", "kernel", "n_out"), COMBOS)
def test_read_form_output_inferred_from_input(stride: int, dil: int, off: int, kernel: int,
                                              n_out: int) -> None:
    rng = np.random.default_rng(stride * 100 + dil * 10 + off + kernel * 7 + n_out)
    x = rng.standard_normal(in_size(stride, dil, off, kernel, n_out))
    w = rng.standard_normal(kernel)
    t = oc.einsum(f"{spec_axis(stride, dil, off)}; k => o", oc.ndarray(x), oc.ndarray(w))
    got = oc.eval(t, precision="float64")
    np.testing.assert_allclose(got, ref_read(x, w, stride, dil, off, n_out), rtol=1e-12)


@pytest.mark.parametrize(("stride", "dil", "off", "kernel", "n_out"), COMBOS)
def test_read_form_input_inferred_from_output(stride: int, dil: int, off: int, kernel: int,
                                              n_out: int) -> None:
    """The input is a parameter sized by inference from the output (fixed by a third
    operand) and the kernel; its largest index is its last position."""
    x = oc.param(f"x_aff_{stride}{dil}{off}{kernel}{n_out}", init=1.5)
    w = np.arange(1.0, kernel + 1)
    ones = np.ones(n_out)
    t = oc.einsum(f"{spec_axis(stride, dil, off)}; k; o => o", x, oc.ndarray(w),
                  oc.ndarray(ones))
    got = oc.eval(t, precision="float64")
    assert x.shape.output == (in_size(stride, dil, off, kernel, n_out),)
    np.testing.assert_allclose(got, np.full(n_out, 1.5 * w.sum()), rtol=1e-12)


@pytest.mark.parametrize(("stride", "dil", "off", "kernel", "n_out"), COMBOS)
def test_write_form_result_sized_from_operands(stride: int, dil: int, off: int, kernel: int,
                                               n_out: int) -> None:
    rng = np.random.default_rng(7 + stride + 3 * dil + 5 * off + 11 * kernel + 13 * n_out)
    x, w = rng.standard_normal(n_out), rng.standard_normal(kernel)
    t = oc.einsum(f"o; k => {spec_axis(stride, dil, off)}", oc.ndarray(x), oc.ndarray(w))
    got = oc.eval(t, precision="float64")
    want = np.zeros(in_size(stride, dil, off, kernel, n_out))
    for o, k in itertools.product(range(n_out), range(kernel)):
        want[stride * o + off + dil * k] += x[o] * w[k]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_reported_case_is_a_located_shape_error() -> None:
    x, w = oc.ndarray(np.arange(1.0, 8.0)), oc.ndarray([1.0, 10.0, 100.0])
    with pytest.raises(oc.ShapeError) as info:
        oc.einsum("2*o<+1+k; k => o", x, w)  # MARK:reported
    msg = str(info.value)
    assert "axis size 7 does not fit the affine index" in msg and HERE in msg, msg


def test_reported_write_form_matches_numpy() -> None:
    x, w = np.arange(1.0, 8.0), np.array([1.0, 10.0, 100.0])
    got = oc.eval(oc.einsum("o; k => 2*o<+1+k", oc.ndarray(x), oc.ndarray(w)))
    want = np.zeros(16)
    for o, k in itertools.product(range(7), range(3)):
        want[2 * o + 1 + k] += x[o] * w[k]
    np.testing.assert_allclose(got, want)


@pytest.mark.parametrize(("spec", "n", "kernel"), [
    ("2*o<+1+k; k => o", 7, 3),
    ("o<+2+k; k => o", 4, 3),  # offset + span exceed the input
    ("3*o<+2*k; k => o", 7, 2),  # 7 - span 3 is not a multiple of 3
    ("o<+k; k => o", 2, 3),  # kernel wider than the input
])
def test_inputs_that_do_not_fit_are_shape_errors(spec: str, n: int, kernel: int) -> None:
    with pytest.raises(oc.ShapeError, match=f"axis size {n} does not fit"):
        oc.einsum(spec, oc.ndarray(np.ones(n)), oc.ndarray(np.ones(kernel)))


def test_gradients_of_an_offset_convolution() -> None:
    """d/dx and d/dw of sum(conv) against float64 central differences."""
    stride, dil, off, kernel, n_out = 2, 2, 1, 2, 3
    n = in_size(stride, dil, off, kernel, n_out)
    rng = np.random.default_rng(3)
    x0, w0 = rng.standard_normal(n), rng.standard_normal(kernel)
    x = oc.param("x_aff_grad", output_dims=[n], init=x0)
    w = oc.param("w_aff_grad", output_dims=[kernel], init=w0)
    loss = oc.einsum("o=>", oc.einsum(f"{spec_axis(stride, dil, off)}; k => o", x, w) ** 2.0)
    _, (gx, gw) = oc.value_and_grad(loss, [x, w])

    def f(xv: np.ndarray, wv: np.ndarray) -> float:
        return float((ref_read(xv, wv, stride, dil, off, n_out) ** 2).sum())

    eps = 1e-6
    for arr, g, is_x in ((x0, gx, True), (w0, gw, False)):
        num = np.zeros_like(arr)
        for i in range(len(arr)):
            e = np.zeros_like(arr)
            e[i] = eps
            plus = f(x0 + e, w0) if is_x else f(x0, w0 + e)
            minus = f(x0 - e, w0) if is_x else f(x0, w0 - e)
            num[i] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(g, num, rtol=1e-3, atol=1e-3)
