"""Helpers of test_c_math.py: the C backend's math helpers compiled into one loop per function
and precision (as generated code is built: same gcc and flags), called over NumPy arrays;
errors in ULPs against a higher-precision reference."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import cffi
import numpy as np

from ocannl_ast.backends import compiler
from ocannl_ast.backends.c_syntax import C, Word
from ocannl_ast.lowering.loop_ir import Precision

FUNCS = ("exp", "expm1", "log", "tanh")
PRECISIONS = {"float32": (Precision.FLOAT32, np.float32), "float64": (Precision.FLOAT64, np.float64)}


def source(libm: bool = False) -> str:
    """One C file: `apply_<fn>_<f|d>(out, in, n)` for each function and precision, calling
    our helpers (or libm's with `libm`)."""
    lines = ["#include <math.h>", "#include <stdint.h>", ""]
    for prec, _ in PRECISIONS.values():
        words = C.words(prec)
        s, t = words[Word.SUFFIX], words[Word.TYPE]
        lines += C.helper_defs({"select", *(f"math_{f}" for f in FUNCS)}, words)
        for f in FUNCS:
            call = f"{f}{words[Word.LIBM]}" if libm else f"ocannl_{f}_{s}"
            lines += [(f"void apply_{f}_{s}({t}* restrict out, const {t}* restrict in, "
                       f"int64_t n) {{"),
                      f"  for (int64_t i = 0; i < n; ++i) out[i] = {call}(in[i]);", "}", ""]
    return "\n".join(lines)


def build(directory: Path, libm: bool = False, extra: tuple[str, ...] = ()
          ) -> tuple[dict[tuple[str, str], Callable[[np.ndarray], np.ndarray]], str]:
    """Compile `source()` with the backend's flags; the functions by (name, precision), and
    gcc's stderr (its vectorization report when `extra` asks for one)."""
    c_path, so_path = directory / "m.c", directory / "m.so"
    c_path.write_text(source(libm))
    flags = compiler.effective_flags(compiler.DEFAULT_OPT_FLAGS)
    proc = subprocess.run([compiler.CC, *flags, *extra, "-o", str(so_path), str(c_path), "-lm"],
                          capture_output=True, text=True, check=True)
    ffi = cffi.FFI()
    for prec, _ in PRECISIONS.values():
        words = C.words(prec)
        for f in FUNCS:
            ffi.cdef(f"void apply_{f}_{words[Word.SUFFIX]}({words[Word.TYPE]} *, "
                     f"{words[Word.TYPE]} *, int64_t);")
    lib = ffi.dlopen(str(so_path))
    out = {}
    for pname, (prec, dtype) in PRECISIONS.items():
        s = C.words(prec)[Word.SUFFIX]
        for f in FUNCS:
            fn = getattr(lib, f"apply_{f}_{s}")

            def call(x: np.ndarray, fn: object = fn, dtype: type = dtype) -> np.ndarray:
                x = np.ascontiguousarray(x, dtype=dtype)
                y = np.empty_like(x)
                tname = "float[]" if dtype is np.float32 else "double[]"
                fn(ffi.from_buffer(tname, y), ffi.from_buffer(tname, x), x.size)  # type: ignore[operator]
                return y

            out[(f, pname)] = call
    return out, proc.stderr


def reference(f: str, x: np.ndarray) -> np.ndarray:
    """`f(x)` in a wider type: float64 for float32 inputs, long double for float64."""
    wide = np.float64 if x.dtype == np.float32 else np.longdouble
    with np.errstate(all="ignore"):
        return getattr(np, f)(x.astype(wide))


def ulp_errors(got: np.ndarray, ref: np.ndarray, dtype: type) -> np.ndarray:
    """|got - ref| in units of the last place of `dtype` at ref (subnormal spacing below the
    normal range). Where ref is not finite or rounds out of range, 0 if got is the same
    special value (inf of the right sign, NaN), else inf."""
    fi = np.finfo(dtype)
    p, emin = fi.nmant + 1, fi.minexp
    wide = ref.dtype
    finite = np.isfinite(ref) & (np.abs(ref) <= fi.max.astype(wide))
    r = np.where(finite, ref, 1).astype(wide)
    _, e = np.frexp(np.abs(r))
    ulp = np.ldexp(np.ones_like(r), np.maximum(e - 1, emin) - (p - 1))
    err = np.abs(got.astype(wide) - r) / ulp
    special_ok = (np.isnan(ref) & np.isnan(got)) | (
        ~np.isnan(ref) & (got.astype(wide) == np.where(np.isnan(ref), 0, ref).astype(dtype)
                          .astype(wide)))
    err = np.where(finite, np.where(np.isfinite(got), err, np.inf),
                   np.where(special_ok, 0.0, np.inf))
    return err


def inputs(dtype: type, n_random: int, seed: int = 0) -> np.ndarray:
    """Random bit patterns (every class: normal, subnormal, inf, NaN, both signs), a dense
    sweep of [-120, 120] and of [-1, 1], every power of two and its neighbours, specials."""
    rng = np.random.default_rng(seed)
    ui = np.uint32 if dtype is np.float32 else np.uint64
    bits = rng.integers(0, np.iinfo(ui).max, size=n_random, dtype=ui, endpoint=True)
    fi = np.finfo(dtype)
    exps = np.arange(fi.minexp - fi.nmant, fi.maxexp)
    powers = np.ldexp(np.ones(exps.size, dtype=dtype), exps)
    near = np.concatenate([powers, np.nextafter(powers, dtype(np.inf)),
                           np.nextafter(powers, dtype(0))])
    wide = np.linspace(-120, 120, n_random // 4, dtype=dtype)
    small = np.linspace(-1, 1, n_random // 4, dtype=dtype)
    specials = np.array([0.0, np.inf, np.nan, fi.max, fi.tiny, fi.smallest_subnormal, 1.0,
                         fi.eps], dtype=dtype)
    parts = [bits.view(dtype), near, wide, small, specials]
    parts += [-p for p in parts]
    return np.concatenate(parts)


def thresholds(dtype: type) -> np.ndarray:
    """The boundaries where exp/expm1/tanh change regime (overflow, subnormal, zero results,
    the helpers' clamps), each with its 64 neighbours on both sides."""
    edges = [88.72283935546875, 88.8, -87.33654, -103.972, -104.0, -20.0, 9.5, 25 * 0.6931,
             709.782712893384, 710.0, -708.3964, -745.1332191019412, -746.0, -40.0, 20.0,
             0.3465735902799727, -0.3465735902799727]
    out = []
    for v in edges:
        c = dtype(v)
        lo = hi = c
        for _ in range(64):
            lo, hi = np.nextafter(lo, dtype(-np.inf)), np.nextafter(hi, dtype(np.inf))
            out += [lo, hi]
        out.append(c)
    return np.array(out, dtype=dtype)
