"""The contraction kernel's offset tables written into the source (`PRECOMPUTED_MAX`): a
small call passes its tables themselves instead of building them on every call. From the
user's side: products of every layout (transposed, batched, a convolution's window mask as
a third factor, accumulating gradients) give NumPy's values and the same bits as with the
tables built at run time; and the tables are the offsets the C side builds."""

from __future__ import annotations

import itertools
import shutil

import numpy as np
import pytest

import ocannl_ast as oc
from conv_util import masked_conv
from ocannl_ast.backends import c_contraction, c_contraction_kernel
from ocannl_ast.backends.c_contraction_kernel import mixed_radix, precomputed

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

KERNEL_NOTE = "contraction kernel:"


def _data(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.fixture
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every contraction the kernel can express goes through it, however small."""
    monkeypatch.setattr(c_contraction, "MIN_EXTENT", 1)
    monkeypatch.setattr(c_contraction, "MIN_WORK", 1)


def test_mixed_radix_is_the_offsets_of_nested_loops() -> None:
    extents, strides = [3, 1, 4, 2], [100, 7, -5, 1]
    want = [sum(d * s for d, s in zip(digits, strides, strict=True))
            for digits in itertools.product(*(range(e) for e in extents))]
    assert mixed_radix(extents, strides) == want
    assert mixed_radix([], []) == [0]


def test_precomputed_layout_and_limit() -> None:
    # M: one symbol (5; a 3, a2 0, c 4), N: two (2, 3; b 1 and 10, c 1 and 2), K: one (4)
    d = [1, 2, 1, 5, 3, 0, 4, 2, 10, 0, 2, 3, 1, 0, 1, 4, 1, 0, 20, 0]
    t = precomputed(d, has_a2=False, has_b2=False)
    assert t is not None
    m, n, k = 5, 6, 4
    assert t[:6] == [-1, m, n, k, 0, 0]  # cn 0,1,2,2,3,4: not unit; bn 0,1,2,10,..: not unit
    body = t[6:]
    assert len(body) == 2 * m + 2 * n + 2 * k
    assert body[:m] == [3 * i for i in range(m)]  # am
    assert body[m:2 * m] == [4 * i for i in range(m)]  # cm
    assert body[2 * m:2 * m + n] == [10 * i + j for i in range(2) for j in range(3)]  # bn
    assert body[2 * m + n:2 * m + 2 * n] == [2 * i + j for i in range(2) for j in range(3)]
    assert body[-2 * k:] == [*range(k), *(20 * i for i in range(k))]  # ak, bk
    both = precomputed(d, has_a2=True, has_b2=True)
    assert both is not None and len(both) == 6 + 3 * m + 3 * n + 4 * k
    big = [1, 1, 1, 4096, 1, 0, 1, 16, 1, 0, 16, 16, 16, 0, 1, 0]
    assert precomputed(big, has_a2=False, has_b2=False) is None
    # 384 entries but 64 x 80 x 48 multiply-adds: building the tables costs little there
    wide = [1, 1, 1, 64, 48, 0, 80, 80, 1, 0, 1, 48, 1, 0, 80, 0]
    assert precomputed(wide, has_a2=False, has_b2=False) is None


def _cases() -> list[tuple[str, np.ndarray, np.ndarray, int]]:
    return [
        ("ij;jk=>ik", _data(1, (20, 16)), _data(2, (16, 16)), 0),
        ("ij;kj=>ik", _data(3, (20, 16)), _data(4, (16, 16)), 0),
        ("ji;jk=>ik", _data(5, (20, 16)), _data(6, (20, 16)), 0),
        ("ij;jk=>ki", _data(7, (13, 7)), _data(8, (7, 17)), 0),
        ("bij;bjk=>bik", _data(9, (3, 9, 5)), _data(10, (3, 5, 17)), 0),
        ("ijl;jlk=>ik", _data(11, (7, 5, 3)), _data(12, (5, 3, 33)), 0),
        ("ij;jk=>ik", _data(13, (200, 16)), _data(14, (16, 16)), 0),
        ("ij;jk=>ik", _data(15, (300, 300)), _data(16, (300, 40)), 0),  # past the limit
    ]


def _run(precision: str, limit: int | None) -> tuple[list[np.ndarray], str]:
    saved = c_contraction_kernel.PRECOMPUTED_MAX
    if limit is not None:
        c_contraction_kernel.PRECOMPUTED_MAX = limit
    try:
        dtype = np.float32 if precision == "float32" else np.float64
        ys = [oc.einsum(spec, oc.ndarray(a.astype(dtype), batch_axes=nb),
                        oc.ndarray(b.astype(dtype), batch_axes=nb))
              for spec, a, b, nb in _cases()]
        code = [y.forward for y in ys]
        src = oc.render(code, precision=precision)
        ctx = oc.Context(precision=precision)
        ctx.compile(code)()
        return [ctx.get(y) for y in ys], src
    finally:
        c_contraction_kernel.PRECOMPUTED_MAX = saved


@pytest.mark.usefixtures("any_size")
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_precomputed_tables_give_numpys_values_and_the_same_bits(precision: str) -> None:
    on, src_on = _run(precision, None)
    off, src_off = _run(precision, 0)
    tables = [ln for ln in src_on.splitlines()
              if "static const int64_t ocannl_mmd" in ln and "b[] = " not in ln]  # not batch
    assert len(tables) == len(_cases()) == src_on.count(KERNEL_NOTE)
    assert sum("= {-1, " in ln for ln in tables) == len(_cases()) - 1  # all but the big one
    assert "= {-1, " not in src_off
    for (spec, a, b, _), x, y in zip(_cases(), on, off, strict=True):
        want = np.einsum(spec.replace(";", ",").replace("=>", "->"), a, b)
        tol = 1e-4 if precision == "float32" else 1e-11
        np.testing.assert_allclose(x, want, rtol=tol, atol=tol * np.sqrt(a.size), err_msg=spec)
        assert x.tobytes() == y.tobytes(), spec


def _conv_grad(limit: int | None) -> tuple[bytes, str]:
    saved = c_contraction_kernel.PRECOMPUTED_MAX
    if limit is not None:
        c_contraction_kernel.PRECOMPUTED_MAX = limit
    try:
        xs, cs = _data(20, (2, 6, 6, 3)), _data(21, (2, 6, 6, 5))
        y = masked_conv(oc.ndarray(xs.astype(np.float32), batch_axes=1), 5)
        loss = oc.einsum("..b..|i,j,o;..b..|i,j,o=>", y,
                         oc.ndarray(cs.astype(np.float32), batch_axes=1))
        (kernel,) = y.params()
        src = oc.render(oc.grad_update(loss), precision="float32")
        _, (gk,) = oc.value_and_grad(loss, [kernel], ctx=oc.Context(precision="float32"))
        return gk.tobytes(), src
    finally:
        c_contraction_kernel.PRECOMPUTED_MAX = saved


@pytest.mark.usefixtures("any_size")
def test_window_mask_factor_with_precomputed_tables() -> None:
    on, src_on = _conv_grad(None)
    off, src_off = _conv_grad(0)
    assert any(KERNEL_NOTE in ln and "window" in ln for ln in src_on.splitlines())
    assert "= {-1, " in src_on and "= {-1, " not in src_off
    assert on == off


@pytest.mark.usefixtures("any_size")
def test_accumulating_gradients_with_precomputed_tables() -> None:
    m, k, n = 9, 5, 17
    coef = _data(30, (m, n))

    def f(a: oc.Tensor, b: oc.Tensor) -> oc.Tensor:
        y = oc.einsum("ij;jk=>ik", a, b) + oc.einsum("ij;jk=>ik", a, b * b)
        return oc.einsum("ik;ik=>", y, oc.ndarray(coef))

    oc.testing.check_grads(f, [_data(31, (m, k)), _data(32, (k, n))])
