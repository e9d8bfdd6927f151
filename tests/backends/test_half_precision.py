"""16-bit storage precisions (float16, bfloat16; float32 compute) in the backends: the C
conversion helpers against NumPy over every half and a wide sample of floats (both the
`_Float16` path and the bit-manipulation fallback), routines' stores bit for bit against a
NumPy reference, the CUDA source compiling clean with NVRTC, and the emulated CUDA backend
agreeing with C bit for bit."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import cffi
import cuda_cases as cc
import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import compiler, cuda_nvrtc
from ocannl_ast.backends.c_syntax import C
from ocannl_ast.lowering.loop_ir import Precision

HALF_PRECISIONS = ("float16", "bfloat16")


# ---- independent NumPy references -------------------------------------------------------


def bf16_bits_ref(x32: np.ndarray) -> np.ndarray:
    """bfloat16 bits of float32s by integer round-to-nearest-even on the bit patterns."""
    u = np.ascontiguousarray(x32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x32)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


def store_ref(precision: str, x32: np.ndarray) -> np.ndarray:
    """float32 values as the stored cells of `precision` (float16 by NumPy's conversion)."""
    if precision == "float16":
        with np.errstate(over="ignore"):
            return np.asarray(x32, dtype=np.float32).astype(np.float16)
    return bf16_bits_ref(x32)


def load_ref(precision: str, cells: np.ndarray) -> np.ndarray:
    if precision == "float16":
        return cells.astype(np.float32)
    return (cells.astype(np.uint32) << 16).view(np.float32)


def as_float(precision: str, got: np.ndarray) -> np.ndarray:
    """What `ctx.get` gave, as the float32 values of the cells."""
    return np.asarray(got, dtype=np.float32)


def sample_floats(n: int = 1 << 18, seed: int = 0) -> np.ndarray:
    """Random float32 bit patterns plus the hard cases: ties, near-ties, subnormals of both
    formats, overflow boundaries, infinities, NaNs, signed zeros."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 1 << 32, n, dtype=np.uint64).astype(np.uint32)
    halves = np.arange(1 << 16, dtype=np.uint32)
    specials = [halves << 16, (halves << 16) | 0x8000, (halves << 16) | 0x7FFF,
                (halves << 16) | 0x8001]
    f16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    f16 = f16[np.isfinite(f16)].astype(np.float32)
    nxt = np.nextafter(f16[:-1], f16[1:]).astype(np.float32)
    mid = ((f16[:-1].astype(np.float64) + f16[1:]) / 2).astype(np.float32)
    extra = np.array([65504, 65519.996, 65520, 65536, 3.3895e38, 3.40282e38, np.inf, -np.inf,
                      np.nan, -np.nan, 0.0, -0.0, 2.0**-24, 2.0**-25, 1.5 * 2.0**-25,
                      2.0**-14, 2.0**-133, 2.0**-134, 1e-45], dtype=np.float32)
    out = np.concatenate([bits.view(np.float32), *(s.view(np.float32) for s in specials),
                          f16, nxt, mid, -mid, extra])
    return np.ascontiguousarray(out)


# ---- the C helpers ------------------------------------------------------------------------


def _build_helpers(directory: Path, defines: tuple[str, ...]) -> dict[str, Callable[..., None]]:
    words = C.words(Precision.FLOAT16)
    lines = ["#include <math.h>", "#include <stdint.h>", ""]
    lines += C.helper_defs({"half", "bfloat16"}, words)
    for fn in ("ocannl_h2f", "ocannl_bf2f"):
        lines += [(f"void load_{fn}(float* out, const unsigned short* in, int64_t n) "
                  f"{{ for (int64_t i = 0; i < n; ++i) out[i] = {fn}(in[i]); }}")]
    for fn in ("ocannl_f2h", "ocannl_f2bf"):
        lines += [(f"void store_{fn}(unsigned short* out, const float* in, int64_t n) "
                  f"{{ for (int64_t i = 0; i < n; ++i) out[i] = {fn}(in[i]); }}")]
    c_path, so_path = directory / "h.c", directory / "h.so"
    c_path.write_text("\n".join(lines) + "\n")
    flags = compiler.effective_flags(compiler.DEFAULT_OPT_FLAGS)
    subprocess.run([compiler.CC, *flags, *defines, "-o", str(so_path), str(c_path), "-lm"],
                   capture_output=True, text=True, check=True)
    ffi = cffi.FFI()
    ffi.cdef("void load_ocannl_h2f(float*, unsigned short*, int64_t);"
             "void load_ocannl_bf2f(float*, unsigned short*, int64_t);"
             "void store_ocannl_f2h(unsigned short*, float*, int64_t);"
             "void store_ocannl_f2bf(unsigned short*, float*, int64_t);")
    lib = ffi.dlopen(str(so_path))

    def loader(fn: str) -> Callable[..., None]:
        def call(cells: np.ndarray) -> np.ndarray:
            cells = np.ascontiguousarray(cells, dtype=np.uint16)
            out = np.empty(cells.shape, np.float32)
            getattr(lib, f"load_{fn}")(ffi.from_buffer("float[]", out),
                                       ffi.from_buffer("unsigned short[]", cells), cells.size)
            return out
        return call

    def storer(fn: str) -> Callable[..., None]:
        def call(x: np.ndarray) -> np.ndarray:
            x = np.ascontiguousarray(x, dtype=np.float32)
            out = np.empty(x.shape, np.uint16)
            getattr(lib, f"store_{fn}")(ffi.from_buffer("unsigned short[]", out),
                                        ffi.from_buffer("float[]", x), x.size)
            return out
        return call

    return {"load_float16": loader("ocannl_h2f"), "load_bfloat16": loader("ocannl_bf2f"),
            "store_float16": storer("ocannl_f2h"), "store_bfloat16": storer("ocannl_f2bf")}


@pytest.mark.parametrize("defines", [(), ("-DOCANNL_NO_FLOAT16",)],
                         ids=["native_float16", "bit_manipulation"])
def test_c_conversions_round_to_nearest_even(tmp_path: Path, defines: tuple[str, ...]) -> None:
    fns = _build_helpers(tmp_path, defines)
    cells = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    x = sample_floats()
    for prec in HALF_PRECISIONS:
        got = fns[f"load_{prec}"](cells)
        want = load_ref(prec, cells.view(np.float16) if prec == "float16" else cells)
        np.testing.assert_array_equal(got.view(np.uint32)[~np.isnan(want)],
                                      want.view(np.uint32)[~np.isnan(want)])
        assert np.isnan(got[np.isnan(want)]).all()
        stored = fns[f"store_{prec}"](x)
        ref = store_ref(prec, x).view(np.uint16)
        nan = np.isnan(x)
        np.testing.assert_array_equal(stored[~nan], ref[~nan], err_msg=prec)
        back = fns[f"load_{prec}"](stored[nan])
        assert np.isnan(back).all(), f"{prec}: a NaN must stay NaN"
        # the sign of a NaN is kept
        np.testing.assert_array_equal(stored[nan] >> 15, x[nan].view(np.uint32) >> 31)


def test_library_bfloat16_rounding_matches_bit_reference() -> None:
    from ocannl_ast.tensor.half import from_bfloat16_bits, to_bfloat16_bits

    x = sample_floats(1 << 16, seed=1)
    np.testing.assert_array_equal(to_bfloat16_bits(x)[~np.isnan(x)],
                                  bf16_bits_ref(x)[~np.isnan(x)])
    assert np.isnan(from_bfloat16_bits(to_bfloat16_bits(x[np.isnan(x)]))).all()
    # from float64: one rounding (a float32 tie that float64 breaks upward rounds up)
    tie_plus = np.float64(1.0) + 2.0**-8 + 2.0**-40
    assert from_bfloat16_bits(to_bfloat16_bits([tie_plus]))[0] == 1.0 + 2.0**-7


# ---- routines ---------------------------------------------------------------------------


@pytest.mark.parametrize("precision", HALF_PRECISIONS)
def test_pointwise_routine_stores_bit_for_bit(precision: str) -> None:
    """`a * b + c` stored in 16 bits: inputs rounded once on `set`, the float32 result of
    float32 arithmetic rounded once on store."""
    rng = np.random.default_rng(7)
    a, b, c = (rng.standard_normal((6, 50)) * s for s in (1.0, 100.0, 1e-3))
    b[0, :5] = [1e5, -1e5, 1e-7, np.inf, 0.0]
    ctx = oc.Context(precision=precision)
    ta, tb, tc = (oc.ndarray(v, label=n) for v, n in ((a, "a"), (b, "b"), (c, "c")))
    with np.errstate(all="ignore"):
        got = as_float(precision, ctx.eval(ta * tb + tc))
        a32, b32, c32 = (load_ref(precision, store_ref(precision, v.astype(np.float32)))
                         if precision == "bfloat16" else v.astype(np.float16).astype(np.float32)
                         for v in (a, b, c))
        want = load_ref(precision, store_ref(precision, a32 * b32 + c32))
    np.testing.assert_array_equal(got, want)
    if precision == "bfloat16":
        assert ctx.get(ta).dtype == np.float32
    else:
        assert ctx.get(ta).dtype == np.float16


@pytest.mark.parametrize("precision", HALF_PRECISIONS)
def test_param_init_and_contraction(precision: str) -> None:
    """A param's random init lands in 16-bit cells (rounded float32 uniforms in [-1, 1));
    a contraction big enough for the C contraction kernel runs as converting loops instead
    and accumulates in float32."""
    oc.set_seed(3)
    ctx = oc.Context(precision=precision)
    w = oc.param("w", input_dims=[96], output_dims=[40])
    x = oc.ndarray(np.linspace(-1, 1, 96 * 24).reshape(24, 96), batch_axes=1, label="x")
    y = w @ x
    got = ctx.eval(y).astype(np.float64)
    wv = ctx.get(w).astype(np.float64)
    assert (wv >= -1).all() and (wv <= 1).all() and np.unique(wv).size > 100
    xs = ctx.get(x).astype(np.float64)
    ref = np.einsum("oi,bi->bo", wv, xs)
    eps = 2.0**-11 if precision == "float16" else 2.0**-8
    np.testing.assert_allclose(got, ref, rtol=eps, atol=eps * np.abs(ref).max())


# ---- CUDA ---------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", HALF_PRECISIONS)
def test_cuda_source_compiles_with_nvrtc(precision: str) -> None:
    try:
        cuda_nvrtc.nvrtc_version()
    except oc.BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")
    case = cc.moons_step()
    src = oc.render(case["code"], backend="cuda", precision=precision)
    assert "unsigned short* __restrict__" in src
    ptx, log = cuda_nvrtc.nvrtc_compile("moons_step", src, "compute_90")
    assert log == "" and b".entry" in ptx
    assert (b"cvt.rn.f16.f32" in ptx) == (precision == "float16")


@pytest.mark.parametrize("precision", HALF_PRECISIONS)
def test_cuda_emulated_matches_c_bit_for_bit(precision: str, cuda_emu_driver: object) -> None:
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((5, 7)), rng.standard_normal((7, 3))
    got = {}
    for backend in ("c", "cuda"):
        oc.set_seed(11)
        ctx = oc.Context(backend=backend, precision=precision)
        w = oc.param("w", output_dims=[3])
        mm = oc.tanh(oc.einsum("ij;jk=>ik", oc.ndarray(a, label="a"), oc.ndarray(b, label="b"))
                     ) * w
        ctx.compile(mm.forward, keep=[mm])()
        got[backend] = (ctx.get(mm), ctx.get(w))
    for c_val, cuda_val in zip(got["c"], got["cuda"]):
        np.testing.assert_array_equal(np.asarray(cuda_val, np.float32),
                                      np.asarray(c_val, np.float32))


def test_nvrtc_leaves_python_bytes_constants_alone() -> None:
    """An empty NVRTC log is one byte: written into a bytes object it would overwrite
    CPython's shared b" " (and the BF16 checkpoint header padding with it)."""
    try:
        cuda_nvrtc.nvrtc_version()
    except oc.BackendError as e:
        pytest.skip(f"NVRTC is not importable here: {e}")
    _, log = cuda_nvrtc.nvrtc_compile("k", 'extern "C" __global__ void k(float* a) '
                                      "{ a[0] = 1.0f; }", "compute_90")
    assert log == ""
    assert b" " * 1 == bytes([32])
