"""The vector combine of a lane reduction's 8 partial results (`backends.c_lane_combine`)
against the scalar tree it replaces, ``((L0 op L1) op (L2 op L3)) op ((L4 op L5) op (L6 op
L7))`` with the backend's own scalar ops (`+`, `ocannl_max`, `ocannl_min`): bit for bit in
float32 and float64 (a sum of NaNs: some NaN, as for the scalar +), over random lanes mixed with NaNs (of different payloads), infinities,
signed zeros and subnormals; compiled with the backend's flags and at -O3 -march=native."""

from __future__ import annotations

import shutil
import subprocess

import cffi
import numpy as np
import pytest

from ocannl_ast.backends import compiler
from ocannl_ast.backends.c_syntax import C, Word
from ocannl_ast.lowering.loop_ir import Precision

pytestmark = pytest.mark.skipif(shutil.which(compiler.CC) is None, reason="gcc is not installed")

OPS = {"add": "({a} + {b})", "max": "ocannl_max_{s}({a}, {b})", "min": "ocannl_min_{s}({a}, {b})"}
PRECISIONS = {"float32": (Precision.FLOAT32, np.float32, np.uint32),
              "float64": (Precision.FLOAT64, np.float64, np.uint64)}
N = 20000


def _source() -> str:
    lines = ["#include <math.h>", "#include <stdint.h>", ""]
    for prec, _, _ in PRECISIONS.values():
        w = C.words(prec)
        s, t = w[Word.SUFFIX], w[Word.TYPE]
        lines += C.helper_defs({"select", "max", "min", "tree8_add", "tree8_max", "tree8_min"},
                               w)
        for name, spelled in OPS.items():
            def op(a: str, b: str, spelled: str = spelled, s: str = s) -> str:
                return spelled.format(a=a, b=b, s=s)
            parts = [f"l[{i}]" for i in range(8)]
            while len(parts) > 1:
                parts = [op(parts[i], parts[i + 1]) for i in range(0, len(parts), 2)]
            lines += [f"void both_{name}_{s}(const {t}* x, {t}* vec, {t}* ref, int64_t n) {{",
                      "  for (int64_t i = 0; i < n; ++i) {",
                      f"    const {t}* l = x + 8 * i;",
                      f"    vec[i] = ocannl_tree8_{name}_{s}(l);",
                      f"    ref[i] = {parts[0]};", "  }", "}", ""]
    return "\n".join(lines)


@pytest.fixture(scope="module", params=["default flags", "-O3 -march=native"])
def lib(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
        ) -> tuple[cffi.FFI, object]:
    d = tmp_path_factory.mktemp("tree8")
    (d / "t.c").write_text(_source())
    flags = list(compiler.effective_flags(compiler.DEFAULT_OPT_FLAGS))
    if request.param != "default flags":
        flags += request.param.split()
    subprocess.run([compiler.CC, *flags, "-o", str(d / "t.so"), str(d / "t.c"), "-lm"],
                   check=True, capture_output=True, text=True)
    ffi = cffi.FFI()
    for prec, _, _ in PRECISIONS.values():
        w = C.words(prec)
        for name in OPS:
            t = w[Word.TYPE]
            ffi.cdef(f"void both_{name}_{w[Word.SUFFIX]}({t}*, {t}*, {t}*, int64_t);")
    return ffi, ffi.dlopen(str(d / "t.so"))


def _lanes(dtype: type, utype: type, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, 8)).astype(dtype)
    info = np.finfo(dtype)
    specials = np.array([np.inf, -np.inf, 0.0, -0.0, info.smallest_subnormal,
                         -info.smallest_subnormal, info.max, -info.max], dtype=dtype)
    pick = rng.random((N, 8))
    x = np.where(pick < 0.25, specials[rng.integers(0, len(specials), (N, 8))], x)
    nans = np.full((N, 8), np.nan, dtype=dtype).view(utype) | rng.integers(
        1, 1 << 8, (N, 8)).astype(utype)  # quiet NaNs with different payloads
    x = np.where(pick > 0.95, nans.view(dtype), x)
    x[:50] = 0.0  # rows of only zeros and only signed zeros
    x[25:50] = -0.0
    x[10:20, ::2] = -0.0
    return np.ascontiguousarray(x)


@pytest.mark.parametrize("prec", sorted(PRECISIONS))
@pytest.mark.parametrize("name", sorted(OPS))
def test_vector_tree_has_the_bits_of_the_scalar_tree(lib: tuple[cffi.FFI, object], name: str,
                                                     prec: str) -> None:
    ffi, so = lib
    p, dtype, utype = PRECISIONS[prec]
    x = _lanes(dtype, utype, seed=len(name) + len(prec))
    vec, ref = np.empty(N, dtype), np.empty(N, dtype)
    tname = "float[]" if dtype is np.float32 else "double[]"
    getattr(so, f"both_{name}_{C.words(p)[Word.SUFFIX]}")(
        ffi.from_buffer(tname, x), ffi.from_buffer(tname, vec), ffi.from_buffer(tname, ref), N)
    same = vec.view(utype) == ref.view(utype)
    if name == "add":  # which NaN's payload a sum of two NaNs keeps is gcc's choice (it
        same |= np.isnan(vec) & np.isnan(ref)  # may swap the operands of + either way)
    bad = np.flatnonzero(~same)
    assert bad.size == 0, (name, prec, x[bad[0]], vec[bad[0]], ref[bad[0]])
    assert np.isnan(ref).any() and (ref == 0).any() and np.signbit(ref[ref == 0]).any()
