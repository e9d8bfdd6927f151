"""Contraction kernels of the C backend, from the user's side: matmul-class einsums and
their gradients, batch axes, transposed operands, convolutions, both precisions, odd and
prime sizes and sizes crossing the kernel's blocks — values against NumPy in float64 (the
kernel uses FMA and blocked sums, so within a tolerance), and the rendered C uses the
kernel where the nest is large enough and the naive loops where it is not."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import c_contraction

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

KERNEL = "ocannl_mm_run_"


def _data(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _tol(k: int, precision: str) -> dict[str, float]:
    eps = 6e-8 if precision == "float32" else 1.2e-16
    return {"rtol": 0.0, "atol": 8 * eps * np.sqrt(k) * k}


def _eval(spec: str, xs: list[np.ndarray], precision: str = "float32",
          batch_axes: int = 0) -> tuple[np.ndarray, str]:
    dtype = np.float32 if precision == "float32" else np.float64
    ts = [oc.ndarray(x.astype(dtype), batch_axes=batch_axes) for x in xs]
    y = oc.einsum(spec, *ts)
    src = oc.render(y.forward, precision=precision)
    return oc.Context(precision=precision).eval(y), src


MATMUL_SIZES = [
    (32, 32, 32), (37, 41, 43), (64, 1, 64), (5, 257, 33), (129, 300, 97), (8, 8, 512),
    (300, 17, 7), (61, 67, 71), (4, 2048, 4), (1, 64, 64), (64, 64, 1), (97, 513, 31),
]


@pytest.mark.parametrize(("m", "k", "n"), MATMUL_SIZES)
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_matmul_values(m: int, k: int, n: int, precision: str) -> None:
    a, b = _data(m * 7 + k, (m, k)), _data(n * 5 + k, (k, n))
    got, src = _eval("ij;jk=>ik", [a, b], precision)
    dtype = np.float32 if precision == "float32" else np.float64
    want = a.astype(dtype).astype(np.float64) @ b.astype(dtype).astype(np.float64)
    np.testing.assert_allclose(got, want, **_tol(k, precision))
    big = min(m, n, k) >= c_contraction.MIN_EXTENT and m * n * k >= c_contraction.MIN_WORK
    assert (KERNEL in src) == big


@pytest.mark.parametrize("spec", ["ij;jk=>ik", "ji;jk=>ik", "ij;kj=>ik", "ji;kj=>ki",
                                  "ij;jk=>ki", "ji;kj=>ik"])
def test_transposed_operands(spec: str) -> None:
    dims = {"i": 45, "j": 38, "k": 53}
    lhs, rhs = spec.split("=>")[0].split(";")
    a = _data(1, tuple(dims[c] for c in lhs))
    b = _data(2, tuple(dims[c] for c in rhs))
    got, src = _eval(spec, [a, b])
    assert KERNEL in src
    np.testing.assert_allclose(got, np.einsum(spec.replace(";", ",").replace("=>", "->"),
                                              a, b), **_tol(38, "float32"))


@pytest.mark.parametrize(("spec", "sa", "sb", "np_spec"), [
    ("bij;bjk=>bik", (3, 33, 40), (3, 40, 35), "bij,bjk->bik"),
    ("bij;jk=>bik", (5, 19, 40), (40, 35), "bij,jk->bik"),
    ("ij;bjk=>bik", (19, 40), (5, 40, 35), "ij,bjk->bik"),
    ("bij;bkj=>bki", (2, 47, 31), (2, 29, 31), "bij,bkj->bki"),
    ("bcij;bcjk=>bcik", (2, 3, 33, 40), (2, 3, 40, 29), "bcij,bcjk->bcik"),
    ("ijl;jlk=>ik", (20, 9, 7), (9, 7, 30), "ijl,jlk->ik"),
])
def test_batch_and_multi_axis_groups(spec: str, sa: tuple[int, ...], sb: tuple[int, ...],
                                     np_spec: str) -> None:
    a, b = _data(3, sa), _data(4, sb)
    got, src = _eval(spec, [a, b])
    assert KERNEL in src
    np.testing.assert_allclose(got, np.einsum(np_spec, a, b), **_tol(63, "float32"))


def test_nonfinite_values_propagate() -> None:
    a, b = _data(5, (40, 36)), _data(6, (36, 50))
    a[3, 7] = np.nan
    a[10, 2] = np.inf
    b[2, 4] = 0.0  # inf * 0: nan in row 10, column 4
    b[5, 9] = -np.inf
    got, src = _eval("ij;jk=>ik", [a, b])
    assert KERNEL in src
    with np.errstate(invalid="ignore"):
        want = a.astype(np.float32).astype(np.float64) @ b.astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], **_tol(36, "float32"))


def test_small_matmul_keeps_loops() -> None:
    _, src = _eval("ij;jk=>ik", [_data(7, (2, 3)), _data(8, (3, 2))])
    assert KERNEL not in src and "for (" in src


def test_matmul_gradients_use_the_kernel_and_match_numpy() -> None:
    xs = _data(9, (40, 36))
    x = oc.ndarray(xs, batch_axes=1)
    w = oc.param("w", output_dims=[24])
    y = w @ x
    c = _data(10, (40, 24))
    loss = oc.einsum("b|o;b|o=>", y, oc.ndarray(c, batch_axes=1))
    src = oc.render(oc.grad_update(loss))
    assert src.count("if (ocannl_mm_run_f(") == 2  # forward, and w's gradient
    _, (gw,) = oc.value_and_grad(loss, [w], precision="float64")
    np.testing.assert_allclose(gw, c.T @ xs, rtol=1e-12, atol=1e-11)


def test_matmul_check_grads_both_factors() -> None:
    coef = oc.ndarray(_data(11, (33, 35)))
    oc.testing.check_grads(
        lambda a, b: oc.einsum("ik;ik=>", oc.einsum("ij;jk=>ik", a, b), coef),
        [_data(12, (33, 31)), _data(13, (31, 35))])


def test_gradient_accumulating_into_a_used_twice_input() -> None:
    coef = oc.ndarray(_data(14, (33, 40)))
    oc.testing.check_grads(
        lambda a, b: oc.einsum("ik;ik=>", oc.einsum("ij;jk=>ik", a, b)
                               + oc.einsum("ij;jk=>ik", a, b * b), coef),
        [_data(15, (33, 37)), _data(16, (37, 40))])


CONV = "b| oh<+kh, ow<+kw, ic; kh, kw, ic -> oc => b| oh, ow, oc"


def _conv_ref(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    k = w.shape[1]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))
    return np.einsum("bhwcxy,oxyc->bhwo", win, w)


@pytest.mark.parametrize(("b", "n", "ci", "co", "k"), [
    (2, 12, 3, 8, 3), (3, 11, 5, 7, 3), (1, 16, 16, 32, 5), (4, 9, 8, 13, 2), (2, 10, 1, 16, 3),
])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_conv_values(b: int, n: int, ci: int, co: int, k: int, precision: str) -> None:
    x, w = _data(17, (b, n, n, ci)), _data(18, (co, k, k, ci))
    dtype = np.float32 if precision == "float32" else np.float64
    tx = oc.ndarray(x.astype(dtype), batch_axes=1)
    tw = oc.ndarray(w.astype(dtype), input_axes=3)
    y = oc.einsum(CONV, tx, tw)
    src = oc.render(y.forward, precision=precision)
    got = oc.Context(precision=precision).eval(y)
    want = _conv_ref(x.astype(dtype).astype(np.float64), w.astype(dtype).astype(np.float64))
    np.testing.assert_allclose(got, want, **_tol(k * k * ci, precision))
    m, kk = b * (n - k + 1) ** 2, k * k * ci
    big = min(m, co, kk) >= c_contraction.MIN_EXTENT and m * co * kk >= c_contraction.MIN_WORK
    assert (KERNEL in src) == big


def test_conv_kernel_gradient_through_the_kernel() -> None:
    xs = _data(19, (2, 10, 10, 4))
    w = oc.param("w", init=_data(21, (16, 3, 3, 4)).astype(np.float32), input_dims=[3, 3, 4],
                 output_dims=[16])
    y = oc.einsum(CONV, oc.ndarray(xs, batch_axes=1), w)
    c = _data(20, (2, 8, 8, 16))
    loss = oc.einsum("..b..|i,j,o;..b..|i,j,o=>", y, oc.ndarray(c, batch_axes=1))
    assert oc.render(oc.grad_update(loss)).count("if (ocannl_mm_run_f(") == 2
    _, (gw,) = oc.value_and_grad(loss, [w], precision="float64")
    win = np.lib.stride_tricks.sliding_window_view(xs, (3, 3), axis=(1, 2))  # b,h,w,c,x,y
    np.testing.assert_allclose(gw, np.einsum("bhwcxy,bhwo->oxyc", win, c),
                               rtol=1e-11, atol=1e-11)


def test_nn_conv2d_forward_and_kernel_grad_use_the_kernel() -> None:
    xs = _data(22, (2, 10, 10, 4))
    y = oc.nn.conv2d(16, 3, padding="valid")(oc.ndarray(xs, batch_axes=1))
    c = _data(23, (2, 8, 8, 16))
    loss = oc.einsum("..b..|i,j,o;..b..|i,j,o=>", y, oc.ndarray(c, batch_axes=1))
    kernel, _ = y.params()
    assert oc.render(oc.grad_update(loss)).count("if (ocannl_mm_run_f(") == 2
    ctx = oc.Context(precision="float64")
    _, (gk,) = oc.value_and_grad(loss, [kernel], ctx=ctx)
    wk = ctx.get(kernel)  # (oc, kh, kw, ic)
    win = np.lib.stride_tricks.sliding_window_view(xs, (3, 3), axis=(1, 2))  # b,h,w,c,x,y
    np.testing.assert_allclose(ctx.get(y), np.einsum("bhwcxy,oxyc->bhwo", win, wk)
                               + ctx.get(y.params()[1]), rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(gk, np.einsum("bhwcxy,bhwo->oxyc", win, c),
                               rtol=1e-11, atol=1e-11)
