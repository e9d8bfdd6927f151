"""The contraction kernel's small-problem path (B packed once on the stack, A read in place,
C written directly), from the user's side: einsums forced through the kernel at any size
(the test lowers the kernel's size thresholds) with N around every vector width, M around
every row-tile height, K up to and past the blocking depth, transposed operands, batch axes,
accumulating gradients and a convolution's window mask — values against NumPy, gradients
against float64 central differences, and the same bits as the blocked path (rendered with
the small path switched off). Accumulation into a strided C (``c += a @ b``) is tested on the
kernel called directly: the lowering's accumulating nests do not reach it at these sizes."""

from __future__ import annotations

import ctypes
import itertools
import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from conv_util import MASK, masked_conv
from ocannl_ast.backends import c_contraction, c_contraction_kernel

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

KERNEL_NOTE = "contraction kernel:"
# N around 1, 2 and 4 vectors of any width (SSE to AVX-512, float and double) and past them.
NS = [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 65]
MS = [3, 1, 4, 5, 7, 9, 13, 17, 20, 200, 6, 11]  # whole row tiles and every remainder
KS = [2, 3, 16, 200, 256, 5, 257, 31]  # 257: past one K block (the blocked path)
SHAPES = [(MS[i % len(MS)], KS[i % len(KS)], n) for i, n in enumerate(NS)] + [
    (200, 16, 16), (16, 200, 16), (20, 16, 16), (8, 1024, 16), (33, 64, 200), (2, 9, 2),
    (3, 256, 1100),  # B past the stack buffer, read in place (few rows of A)
    (70, 300, 48),  # B packed into micro-panels past the stack buffer: the thread's workspace
    (66, 256, 1200)]  # ... and past the workspace's size (its own allocation)


def _data(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _tol(k: int, precision: str) -> dict[str, float]:
    eps = 6e-8 if precision == "float32" else 1.2e-16
    return {"rtol": 0.0, "atol": 8 * eps * np.sqrt(k) * k}


@pytest.fixture
def any_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every contraction the kernel can express goes through it, however small."""
    monkeypatch.setattr(c_contraction, "MIN_EXTENT", 1)
    monkeypatch.setattr(c_contraction, "MIN_WORK", 1)


def _dtype(precision: str) -> type[np.floating]:
    return np.float32 if precision == "float32" else np.float64


Case = tuple[str, np.ndarray, np.ndarray, int]  # spec, a, b, batch axes


def _run(cases: list[Case], precision: str, small: bool = True
         ) -> tuple[list[np.ndarray], str]:
    """All cases' einsums in one compiled routine: their values and the C source."""
    dtype = _dtype(precision)
    saved = c_contraction_kernel.SMALL_BYTES
    c_contraction_kernel.SMALL_BYTES = saved if small else 0
    try:
        ys = [oc.einsum(spec, oc.ndarray(a.astype(dtype), batch_axes=nb),
                        oc.ndarray(b.astype(dtype), batch_axes=nb)) for spec, a, b, nb in cases]
        code = [y.forward for y in ys]
        src = oc.render(code, precision=precision)
        ctx = oc.Context(precision=precision)
        ctx.compile(code)()
        return [ctx.get(y) for y in ys], src
    finally:
        c_contraction_kernel.SMALL_BYTES = saved


def _matmuls() -> list[Case]:
    return [("ij;jk=>ik", _data(m * 31 + k, (m, k)), _data(n * 17 + k, (k, n)), 0)
            for m, k, n in SHAPES]


def _others() -> list[Case]:
    dims = {"i": 13, "j": 7, "k": 17}
    cases: list[Case] = []
    for spec in ["ji;jk=>ik", "ij;kj=>ik", "ji;kj=>ki", "ij;jk=>ki", "ji;kj=>ik"]:
        lhs, rhs = spec.split("=>")[0].split(";")
        cases.append((spec, _data(len(cases), tuple(dims[c] for c in lhs)),
                      _data(50 + len(cases), tuple(dims[c] for c in rhs)), 0))
    cases += [
        ("bij;bjk=>bik", _data(60, (3, 9, 5)), _data(61, (3, 5, 17)), 0),
        ("bij;jk=>bik", _data(62, (5, 3, 16)), _data(63, (16, 9)), 0),
        ("bij;bkj=>bki", _data(64, (2, 11, 6)), _data(65, (2, 3, 6)), 0),
        ("ijl;jlk=>ik", _data(66, (7, 5, 3)), _data(67, (5, 3, 33)), 0),
    ]
    return cases


def _want(case: Case) -> np.ndarray:
    spec, a, b, _ = case
    np_spec = spec.replace(";", ",").replace("=>", "->")
    return np.einsum(np_spec, a, b)


@pytest.mark.usefixtures("any_size")
@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("which", [_matmuls, _others], ids=["matmul", "transposed_batch"])
def test_small_contractions_match_numpy(precision: str,
                                        which: Callable[[], list[Case]]) -> None:
    cases = which()
    got, src = _run(cases, precision)
    assert src.count(KERNEL_NOTE) == len(cases)
    dtype = _dtype(precision)
    for case, value in zip(cases, got, strict=True):
        spec, a, b, nb = case
        exact = (spec, a.astype(dtype).astype(np.float64), b.astype(dtype).astype(np.float64), nb)
        k = int(np.sqrt(a.size * b.size / _want(case).size)) + 1  # >= the summed extent
        np.testing.assert_allclose(value, _want(exact), **_tol(k, precision),
                                   err_msg=f"{spec} {a.shape} {b.shape}")


@pytest.mark.usefixtures("any_size")
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_small_path_has_the_blocked_paths_bits(precision: str) -> None:
    cases = _matmuls() + _others()
    on, src_on = _run(cases, precision, small=True)
    off, src_off = _run(cases, precision, small=False)
    assert src_on != src_off
    assert src_on.count(KERNEL_NOTE) == src_off.count(KERNEL_NOTE) == len(cases)
    for case, x, y in zip(cases, on, off, strict=True):
        assert x.tobytes() == y.tobytes(), f"{case[0]} {case[1].shape} {case[2].shape}"


def _twice(a: oc.Tensor, b: oc.Tensor, coef: oc.Tensor) -> oc.Tensor:
    """a used twice: its gradient accumulates (``+=``) through the kernel."""
    y = oc.einsum("ij;jk=>ik", a, b) + oc.einsum("ij;jk=>ik", a, b * b)
    return oc.einsum("ik;ik=>", y, coef)


@pytest.mark.usefixtures("any_size")
@pytest.mark.parametrize(("m", "k", "n"), [(9, 5, 17), (5, 16, 3), (13, 2, 33), (20, 16, 16)])
def test_small_accumulating_gradients(m: int, k: int, n: int) -> None:
    coef = _data(70, (m, n))
    oc.testing.check_grads(lambda a, b: _twice(a, b, oc.ndarray(coef)),
                           [_data(71, (m, k)), _data(72, (k, n))])
    a = oc.param("a", output_dims=[m, k], init=_data(71, (m, k)))
    b = oc.param("b", output_dims=[k, n], init=_data(72, (k, n)))
    loss = _twice(a, b, oc.ndarray(coef))
    src = oc.render(oc.grad_update(loss), precision="float64")
    assert any(KERNEL_NOTE in line and "+=" in line for line in src.splitlines())
    _, (ga, gb) = oc.value_and_grad(loss, [a, b], ctx=oc.Context(precision="float64"))
    av, bv = _data(71, (m, k)), _data(72, (k, n))
    np.testing.assert_allclose(ga, coef @ bv.T + coef @ (bv * bv).T, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, av.T @ coef + 2 * bv * (av.T @ coef), rtol=1e-12,
                               atol=1e-12)


def _grads_bits(small: bool, m: int, k: int, n: int) -> list[bytes]:
    saved = c_contraction_kernel.SMALL_BYTES
    c_contraction_kernel.SMALL_BYTES = saved if small else 0
    try:
        a = oc.param("a", output_dims=[m, k], init=_data(73, (m, k)).astype(np.float32))
        b = oc.param("b", output_dims=[k, n], init=_data(74, (k, n)).astype(np.float32))
        loss = _twice(a, b, oc.ndarray(_data(75, (m, n)).astype(np.float32)))
        _, grads = oc.value_and_grad(loss, [a, b], ctx=oc.Context(precision="float32"))
        return [g.tobytes() for g in grads]
    finally:
        c_contraction_kernel.SMALL_BYTES = saved


@pytest.mark.usefixtures("any_size")
@pytest.mark.parametrize(("m", "k", "n"), [(9, 5, 17), (200, 16, 16), (3, 31, 65)])
def test_small_gradient_bits_match_the_blocked_path(m: int, k: int, n: int) -> None:
    assert _grads_bits(True, m, k, n) == _grads_bits(False, m, k, n)


def _conv_kernel_grad(xs: np.ndarray, cs: np.ndarray, precision: str, small: bool
                      ) -> tuple[np.ndarray, np.ndarray, str]:
    saved = c_contraction_kernel.SMALL_BYTES
    c_contraction_kernel.SMALL_BYTES = saved if small else 0
    try:
        dtype = _dtype(precision)
        y = masked_conv(oc.ndarray(xs.astype(dtype), batch_axes=1), cs.shape[-1])
        loss = oc.einsum("..b..|i,j,o;..b..|i,j,o=>", y,
                         oc.ndarray(cs.astype(dtype), batch_axes=1))
        (kernel,) = y.params()
        src = oc.render(oc.grad_update(loss), precision=precision)
        ctx = oc.Context(precision=precision)
        _, (gk,) = oc.value_and_grad(loss, [kernel], ctx=ctx)
        return gk, ctx.get(kernel), src
    finally:
        c_contraction_kernel.SMALL_BYTES = saved


@pytest.mark.usefixtures("any_size")
@pytest.mark.parametrize(("b", "n", "ci", "co"), [(2, 6, 3, 5), (1, 5, 2, 17), (3, 4, 4, 16)])
def test_small_conv_kernel_grad_with_window_mask(b: int, n: int, ci: int, co: int) -> None:
    xs, cs = _data(76, (b, n, n, ci)), _data(77, (b, n, n, co))
    gk, _, src = _conv_kernel_grad(xs, cs, "float64", small=True)
    assert any(KERNEL_NOTE in line and "window" in line for line in src.splitlines())
    padded = np.pad(xs, ((0, 0), (1, 1), (1, 1), (0, 0)))
    win = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(1, 2))
    np.testing.assert_allclose(gk, np.einsum("bhwcxy,bhwo,xy->oxyc", win, cs, MASK),
                               rtol=1e-11, atol=1e-11)
    on, _, _ = _conv_kernel_grad(xs, cs, "float32", small=True)
    off, _, _ = _conv_kernel_grad(xs, cs, "float32", small=False)
    assert on.tobytes() == off.tobytes()


# ---- the kernel called directly: accumulation and strided C (`c += a @ b`, which the
# lowering's accumulating nests do not hand to the kernel at these sizes) ----------------

_DRIVER = """
int run_T(const T* a, const T* b, T* c, int acc, const int64_t* d) {
  return ocannl_mm_run_P(a, 0, b, 0, c, acc, 1, d);
}
"""


def _kernel_lib(tmp_path: Path, precision: str, small: bool,
                flags: tuple[str, ...] = ("-march=native",)) -> ctypes.CDLL:
    t, p = ("float", "f") if precision == "float32" else ("double", "d")
    saved = c_contraction_kernel.SMALL_BYTES
    c_contraction_kernel.SMALL_BYTES = saved if small else 0
    try:
        text = "\n".join(["#include <stdint.h>", *c_contraction_kernel.kernel_c(t, p)])
    finally:
        c_contraction_kernel.SMALL_BYTES = saved
    src = tmp_path / f"k_{p}_{int(small)}_{'_'.join(f.strip('-') for f in flags)}.c"
    src.write_text(text + _DRIVER.replace("run_T", "run").replace("T*", t + "*")
                   .replace("_P(", f"_{p}("))
    lib = src.with_suffix(".so")
    subprocess.run(["gcc", "-O2", *flags, "-std=c11", "-ffp-contract=off",
                    "-fno-math-errno", "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
    return ctypes.CDLL(str(lib))


def _call(lib: ctypes.CDLL, a: np.ndarray, b: np.ndarray, c: np.ndarray, acc: bool,
          c_strides: tuple[int, int]) -> None:
    (m, k), n = a.shape, b.shape[1]
    d = np.array([1, 1, 1, m, k, 0, c_strides[0], n, 1, 0, c_strides[1], k, 1, 0, n, 0],
                 dtype=np.int64)
    ptr = ctypes.c_void_p
    lib.run.argtypes = [ptr, ptr, ptr, ctypes.c_int, ptr]
    assert lib.run(a.ctypes.data, b.ctypes.data, c.ctypes.data, int(acc), d.ctypes.data) == 0


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_kernel_accumulates_into_strided_c_with_the_blocked_paths_bits(
        precision: str, tmp_path: Path) -> None:
    dtype = _dtype(precision)
    libs = [_kernel_lib(tmp_path, precision, small) for small in (True, False)]
    for m, k, n in [(9, 5, 17), (200, 16, 16), (16, 200, 16), (13, 3, 1), (8, 31, 33),
                    (4, 256, 65), (5, 257, 9), (17, 7, 64)]:
        a = _data(m + k, (m, k)).astype(dtype)
        b = _data(k + n, (k, n)).astype(dtype)
        for transposed in (False, True):  # C (m, n) with padded rows, or C^T (n, m)
            shape, strides = ((n, m), (1, m)) if transposed else ((m, n + 3), (n + 3, 1))
            c0 = _data(m * n, shape).astype(dtype)
            outs = []
            for lib in libs:
                c = c0.copy()
                _call(lib, a, b, c, True, strides)
                outs.append(c)
            view = outs[0].T if transposed else outs[0][:, :n]
            want = a.astype(np.float64) @ b.astype(np.float64) + (
                c0.T if transposed else c0[:, :n])
            np.testing.assert_allclose(view, want, **_tol(k + 1, precision))
            if not transposed:
                np.testing.assert_array_equal(outs[0][:, n:], c0[:, n:])  # padding untouched
            assert outs[0].tobytes() == outs[1].tobytes(), (m, k, n, transposed)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 flags")
@pytest.mark.parametrize("flags", [("-march=native", "-mtune=znver3"), ("-march=x86-64",)],
                         ids=["znver3_tuning", "no_fma"])
def test_kernel_paths_give_the_same_bits_whatever_gcc_fuses(
        flags: tuple[str, ...], tmp_path: Path) -> None:
    """-mtune=znver3 (``--param avoid-fma-max-bits=256``) makes gcc leave some loop-carried
    ``acc += x * b`` chains as a multiply and an add: the kernel's multiply-adds are
    explicit, so its small and blocked paths (one-row, one-vector tails included) agree on
    any CPU; -march=x86-64 has no FMA at all."""
    for precision in ("float32", "float64"):
        dtype = _dtype(precision)
        libs = [_kernel_lib(tmp_path, precision, small, flags) for small in (True, False)]
        for m, k, n in [(1, 3, 2), (1, 200, 8), (7, 31, 5), (13, 16, 33), (3, 256, 17)]:
            a, b = _data(m + k, (m, k)).astype(dtype), _data(k + n, (k, n)).astype(dtype)
            outs = [np.zeros((m, n), dtype) for _ in libs]
            for lib, c in zip(libs, outs, strict=True):
                _call(lib, a, b, c, False, (n, 1))
            np.testing.assert_allclose(outs[0], a.astype(np.float64) @ b, **_tol(k, precision))
            assert outs[0].tobytes() == outs[1].tobytes(), (precision, m, k, n)


_DRIVER3 = """
int run3_T(const T* a, const T* a2, const T* b, T* c, int acc, const int64_t* d) {
  return ocannl_mm_run_P(a, a2, b, 0, c, acc, 1, d);
}
"""


@pytest.mark.parametrize("a2_pack", [None, 64])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_third_factor_on_a_small_path_has_the_blocked_paths_bits(
        precision: str, a2_pack: int | None, tmp_path: Path) -> None:
    """``c (+)= sum_k a[i,k] * a2[i,k] * b[k,j]`` (the shape of attention's output projection
    times its ones tensor): the small path multiplies a2 into a copy of A first, the product
    the blocked path packs, so both give the same bits (K past one block included); with
    `a2_pack` (bytes of products at once, ``OCK_A2_PACK``) lowered, A goes in strips of
    rows (of 1 to 3 rows here) with the same bits."""
    t, p = ("float", "f") if precision == "float32" else ("double", "d")
    dtype = _dtype(precision)
    libs = []
    for small in (True, False):
        saved = c_contraction_kernel.SMALL_BYTES
        c_contraction_kernel.SMALL_BYTES = saved if small else 0
        try:
            text = "\n".join(["#include <stdint.h>", *c_contraction_kernel.kernel_c(t, p)])
        finally:
            c_contraction_kernel.SMALL_BYTES = saved
        src = tmp_path / f"k3_{p}_{int(small)}_{a2_pack}.c"
        src.write_text(text + _DRIVER3.replace("run3_T", "run3").replace("T*", t + "*")
                       .replace("_P(", f"_{p}("))
        lib = src.with_suffix(".so")
        pack = [f"-DOCK_A2_PACK={a2_pack}"] if a2_pack is not None else []
        subprocess.run(["gcc", "-O2", "-march=native", "-std=c11", "-ffp-contract=off",
                        *pack, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True)
        libs.append(ctypes.CDLL(str(lib)))
    ptr = ctypes.c_void_p
    for (m, k, n), a2_t in itertools.product(
            [(9, 5, 17), (64, 64, 16), (7, 300, 24), (13, 16, 8)], (False, True)):
        # a2 laid out as A (one unit-stride product loop) or transposed (a gather)
        a = _data(m * k, (m, k)).astype(dtype)
        a2 = _data(m + 2 * k, (m, k)).astype(dtype)
        b = _data(k + n, (k, n)).astype(dtype)
        s2 = (1, m) if a2_t else (k, 1)
        if a2_t:
            a2 = np.ascontiguousarray(a2.T).T  # same values, column-major storage
        d = np.array([1, 1, 1, m, k, s2[0], n, n, 1, 0, 1, k, 1, s2[1], n, 0], dtype=np.int64)
        for acc in (False, True):
            c0 = _data(m * n + 1, (m, n)).astype(dtype)
            outs = []
            for lib in libs:
                c = c0.copy()
                lib.run3.argtypes = [ptr, ptr, ptr, ptr, ctypes.c_int, ptr]
                assert lib.run3(a.ctypes.data, a2.ctypes.data, b.ctypes.data, c.ctypes.data,
                                int(acc), d.ctypes.data) == 0
                outs.append(c)
            want = (a.astype(np.float64) * a2) @ b + (c0 if acc else 0)
            np.testing.assert_allclose(outs[0], want, **_tol(k + 1, precision))
            assert outs[0].tobytes() == outs[1].tobytes(), (precision, m, k, n, acc, a2_t)
