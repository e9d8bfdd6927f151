"""Affine coefficients and offsets from Python scope in @op/@cd spec literals (seed 001:
OCANNL splices `stride`/`dilation`): values against NumPy for strided, dilated, offset and
padded convolutions with the ints taken from a module global, a parameter, a local or a
closure; the ambiguity rule (a label sharing a name with a Python int keeps its meaning);
non-int values are SpecErrors located at the spec literal; undecorated calls are unchanged."""

# ruff: noqa: F841  (locals read only inside spec strings are the point of these tests)
from __future__ import annotations

import inspect
import itertools

import numpy as np
import pytest

import ocannl_ast as oc

STRIDE = 2  #: a module global read by the decorated functions below
RNG = np.random.default_rng(1)


def conv_ref(x: np.ndarray, w: np.ndarray, stride: int, dil: int, off: int,
             pad: bool = False) -> np.ndarray:
    span = 1 + (len(w) - 1) * dil
    left = (span - 1) // 2 if pad else 0
    xp = np.pad(x, (left, span)) if pad else x
    n_out = len(x) // stride if pad else (len(x) - off - span) // stride + 1
    return np.array([sum(xp[stride * o + off + dil * k] * w[k] for k in range(len(w)))
                     for o in range(n_out)])


def _line_col(fn: object, needle: str) -> tuple[int, int]:
    """Line and 0-based column of `needle` in the source of `fn`."""
    lines, first = inspect.getsourcelines(fn)  # type: ignore[arg-type]
    for n, text in enumerate(lines):
        if needle in text:
            return first + n, text.index(needle)
    raise AssertionError(needle)


@oc.op
def conv_global_param(x, w, dilation):
    return oc.einsum("STRIDE*o<+dilation*k; k => o", x, w)


@pytest.mark.parametrize("dilation", [1, 2, 3])
def test_op_stride_from_global_dilation_from_parameter(dilation: int) -> None:
    x, w = RNG.standard_normal(15), RNG.standard_normal(3)
    got = oc.eval(conv_global_param(oc.ndarray(x), oc.ndarray(w), dilation),
                  precision="float64")
    np.testing.assert_allclose(got, conv_ref(x, w, STRIDE, dilation, 0), rtol=1e-12)


def make_conv(stride: int, off: int):
    @oc.op
    def conv(x, w):
        dil = stride + 0  # a local
        assert off >= 0  # a closure variable must be read outside the spec to be captured
        return oc.einsum("stride*o<+off+dil*k; k => o", x, w)
    return conv


@pytest.mark.parametrize(("stride", "off"), list(itertools.product([1, 2, 3], [0, 1, 2])))
def test_op_stride_and_offset_from_closure_dilation_local(stride: int, off: int) -> None:
    x = RNG.standard_normal(stride * 3 + off + 1 + stride)  # 4 outputs, span 1 + stride
    w = RNG.standard_normal(2)
    got = oc.eval(make_conv(stride, off)(oc.ndarray(x), oc.ndarray(w)), precision="float64")
    np.testing.assert_allclose(got, conv_ref(x, w, stride, stride, off), rtol=1e-12)


@oc.op
def conv_padded(x, w, s):
    return oc.einsum("s*o=+k; k => o", x, w)


@pytest.mark.parametrize(("stride", "kernel"), [(1, 3), (2, 3), (2, 2), (3, 1)])
def test_op_padded_conv_stride_from_parameter(stride: int, kernel: int) -> None:
    x, w = RNG.standard_normal(12), RNG.standard_normal(kernel)
    got = oc.eval(conv_padded(oc.ndarray(x), oc.ndarray(w), stride), precision="float64")
    np.testing.assert_allclose(got, conv_ref(x, w, stride, 1, 0, pad=True), rtol=1e-12)


@oc.op
def conv2d(x, w, stride):
    return oc.einsum("stride*oh<+kh, stride*ow<+kw, ic; kh, kw, ic, oc => oh, ow, oc", x, w)


def test_op_conv2d_stride_from_parameter() -> None:
    x, w = RNG.standard_normal((7, 9, 2)), RNG.standard_normal((3, 3, 2, 4))
    got = oc.eval(conv2d(oc.ndarray(x), oc.ndarray(w), 2), precision="float64")
    want = np.zeros((3, 4, 4))
    for i, j in itertools.product(range(3), range(4)):
        want[i, j] = np.einsum("abc,abcd->d", x[2 * i:2 * i + 3, 2 * j:2 * j + 3], w)
    np.testing.assert_allclose(got, want, rtol=1e-12)


@oc.cd
def cd_conv(out, x, w, stride, dil):
    out[...] = sum(x * w, logic="stride*o<+dil*k; k => o")


@oc.cd
def cd_interleave(t, a, b, s):
    off = s - 1
    t[...] = sum(a, logic="..., i => ..., s*i")
    t += sum(b, logic="..., i => ..., s*i+off")


@pytest.mark.parametrize(("stride", "dil"), [(1, 1), (2, 1), (2, 2), (3, 2)])
def test_cd_conv_stride_and_dilation_from_parameters(stride: int, dil: int) -> None:
    x, w = RNG.standard_normal(stride * 3 + 1 + 2 * dil), RNG.standard_normal(3)  # 4 outputs
    out = oc.node("out")
    ctx = oc.Context(precision="float64")
    ctx.compile([cd_conv(out, oc.ndarray(x), oc.ndarray(w), stride, dil)])()
    np.testing.assert_allclose(ctx.get(out), conv_ref(x, w, stride, dil, 0), rtol=1e-12)


def test_cd_interleave_offset_from_local() -> None:
    a, b = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    t = oc.node("t")
    ctx = oc.Context(precision="float64")
    ctx.compile([cd_interleave(t, oc.ndarray(a), oc.ndarray(b), 2)])()
    np.testing.assert_array_equal(ctx.get(t), [1, 10, 2, 20, 3, 30])


# -- the ambiguity rule: only coefficient/offset positions are substituted -----------------

@oc.op
def label_named_like_int(x, w):
    k = 2  # `k*` is a coefficient (2); the kernel `+k` and the operand `k` stay a label
    o = 5  # `o` is only ever a label here
    return oc.einsum("k*o<+k; k => o", x, w)


def test_label_sharing_a_name_with_a_python_int_keeps_its_meaning() -> None:
    x, w = RNG.standard_normal(9), RNG.standard_normal(3)
    got = oc.eval(label_named_like_int(oc.ndarray(x), oc.ndarray(w)), precision="float64")
    np.testing.assert_allclose(got, conv_ref(x, w, 2, 1, 0), rtol=1e-12)


@oc.op
def trailing_name_is_kernel_when_used_elsewhere(x, w):
    k = 1  # `+k` names the kernel axis (k indexes w), not an offset of 1
    return oc.einsum("2*o+k; k => o", x, w)


@oc.op
def trailing_name_is_offset_when_used_nowhere_else(x):
    k = 1  # `+k` indexes no axis, so it can only be the offset
    return oc.einsum("2*o+k => o", x)


def test_trailing_plus_name_kernel_or_offset() -> None:
    x, w = RNG.standard_normal(9), RNG.standard_normal(3)
    got = oc.eval(trailing_name_is_kernel_when_used_elsewhere(oc.ndarray(x), oc.ndarray(w)),
                  precision="float64")
    np.testing.assert_allclose(got, conv_ref(x, w, 2, 1, 0), rtol=1e-12)
    y = RNG.standard_normal(8)
    got = oc.eval(trailing_name_is_offset_when_used_nowhere_else(oc.ndarray(y)),
                  precision="float64")
    np.testing.assert_allclose(got, y[1::2], rtol=1e-12)


def test_undecorated_calls_are_unaffected() -> None:
    x, w = oc.ndarray(np.arange(9.0)), oc.ndarray(np.ones(3))
    with pytest.raises(oc.SpecError, match="stride must be an integer literal"):
        oc.einsum("STRIDE*o<+k; k => o", x, w)
    np.testing.assert_allclose(oc.eval(oc.einsum(f"{STRIDE}*o<+k; k => o", x, w)),
                               [3.0, 9.0, 15.0, 21.0])


def make_conv_unused_closure(off: int):
    @oc.op
    def conv(x):
        return oc.einsum("2*o+off => o", x)
    return conv


def test_closure_variable_not_read_by_the_body_is_a_located_spec_error() -> None:
    fn = make_conv_unused_closure(1)
    with pytest.raises(oc.SpecError, match="no Python variable 'off' is bound") as info:
        fn(oc.ndarray(np.arange(6.0)))
    assert info.value.span is not None
    line, col = _line_col(fn, '"2*o+off => o"')
    assert (info.value.span.line, info.value.span.col) == (line, col), str(info.value)


# -- errors ---------------------------------------------------------------------------------

@oc.op
def float_stride(x, w):
    s = 1.5
    return oc.einsum("s*o<+k; k => o", x, w)


@oc.op
def tensor_stride(x, w, s):
    return oc.einsum("s*o<+k; k => o", x, w)


@oc.op
def bool_stride(x, w):
    s = True
    return oc.einsum("s*o<+k; k => o", x, w)


@oc.op
def zero_stride(x, w):
    s = 0
    return oc.einsum("s*o<+k; k => o", x, w)


@oc.cd
def cd_float_offset(out, x, off):
    out[...] = sum(x, logic="2*o+off => o")


@pytest.mark.parametrize(("fn", "what"), [(float_stride, "names a float"),
                                          (tensor_stride, "names a Tensor"),
                                          (bool_stride, "names a bool"),
                                          (zero_stride, "must be positive")])
def test_bad_value_in_scope_is_a_located_spec_error(fn: object, what: str) -> None:
    x, w = oc.ndarray(np.arange(9.0)), oc.ndarray(np.ones(3))
    args = (x, w, oc.ndarray(np.ones(2))) if fn is tensor_stride else (x, w)
    with pytest.raises(oc.SpecError, match=what) as info:
        fn(*args)  # type: ignore[operator]
    err = info.value
    assert err.span is not None
    line, col = _line_col(fn, '"s*o<+k; k => o"')
    assert (err.span.file, err.span.line, err.span.col) == (__file__, line, col), str(err)


def test_cd_non_int_offset_is_a_located_spec_error() -> None:
    with pytest.raises(oc.SpecError, match="'off' is in an affine offset position") as info:
        cd_float_offset(oc.node("out"), oc.ndarray(np.arange(6.0)), 0.5)
    err = info.value
    assert err.span is not None
    line, col = _line_col(cd_float_offset, '"2*o+off => o"')
    assert (err.span.file, err.span.line, err.span.col) == (__file__, line, col), str(err)
