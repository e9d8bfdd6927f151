"""The C backend's own exp, log, tanh, expm1 (ocannl_ast/backends/c_math.py): error bounds in
ULPs against a higher-precision reference over the whole range (random bit patterns of
every class, powers of two and their neighbours, the overflow / subnormal / zero-result
thresholds), special values exact, the loops that call them vectorized by gcc -O2, and
OCANNL_AST_LIBM=1 switching generated code back to libm."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends.c_math import ULP_BOUNDS

sys.path.insert(0, str(Path(__file__).resolve().parent))
import c_math_util as u

N_RANDOM = 1 << 18


@pytest.fixture(scope="module")
def fns(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return u.build(tmp_path_factory.mktemp("cmath"))[0]


@pytest.mark.parametrize("prec", ["float32", "float64"])
@pytest.mark.parametrize("f", u.FUNCS)
def test_ulp_bound_over_the_whole_range(fns: dict, f: str, prec: str) -> None:
    dtype = np.float32 if prec == "float32" else np.float64
    x = np.concatenate([u.inputs(dtype, N_RANDOM, seed=1), u.thresholds(dtype)])
    got = fns[(f, prec)](x)
    with np.errstate(all="ignore"):
        err = u.ulp_errors(got, u.reference(f, x), dtype)
    worst = int(np.argmax(err))
    assert err[worst] <= ULP_BOUNDS[(f, prec)], (
        f"{f} {prec}: {err[worst]:.3g} ulp at x={x[worst]!r}: got {got[worst]!r}, "
        f"reference {u.reference(f, x[worst:worst + 1])[0]!r}")
    assert np.mean(err) < 0.5  # typical inputs are (nearly) correctly rounded


def test_ulp_measure_catches_a_one_ulp_error() -> None:
    x = np.array([1.5, -90.0, 80.0], dtype=np.float32)  # normal, subnormal, large result
    ref = u.reference("exp", x)
    off = np.nextafter(ref.astype(np.float32), np.float32(np.inf))
    err = u.ulp_errors(off, ref, np.float32)
    assert np.all((err > 0.5) & (err < 1.5)), err


SPECIALS = [
    ("exp", np.inf, np.inf), ("exp", -np.inf, 0.0), ("exp", 1000.0, np.inf), ("exp", -1000.0, 0.0),
    ("exp", 0.0, 1.0), ("exp", -0.0, 1.0),
    ("expm1", np.inf, np.inf), ("expm1", -np.inf, -1.0), ("expm1", -1000.0, -1.0),
    ("expm1", 1000.0, np.inf), ("expm1", 0.0, 0.0),
    ("log", 0.0, -np.inf), ("log", -0.0, -np.inf), ("log", -1.0, np.nan), ("log", np.inf, np.inf),
    ("log", -np.inf, np.nan), ("log", 1.0, 0.0),
    ("tanh", np.inf, 1.0), ("tanh", -np.inf, -1.0), ("tanh", 1000.0, 1.0), ("tanh", 0.0, 0.0),
]


@pytest.mark.parametrize("prec", ["float32", "float64"])
@pytest.mark.parametrize(("f", "x", "want"), SPECIALS)
def test_special_values(fns: dict, f: str, x: float, want: float, prec: str) -> None:
    dtype = np.float32 if prec == "float32" else np.float64
    got = fns[(f, prec)](np.array([x, np.nan], dtype=dtype))
    assert np.isnan(got[1])  # NaN in, NaN out
    if np.isnan(want):
        assert np.isnan(got[0])
    else:
        assert got[0] == want, (f, x, got[0])


@pytest.mark.parametrize("prec", ["float32", "float64"])
def test_signed_zeros_and_subnormals(fns: dict, prec: str) -> None:
    dtype = np.float32 if prec == "float32" else np.float64
    tiny = np.finfo(dtype).smallest_subnormal
    t = fns[("tanh", prec)](np.array([-0.0, 0.0, -tiny, tiny], dtype=dtype))
    assert np.array_equal(np.signbit(t), [True, False, True, False])
    assert np.array_equal(t[2:], [-tiny, tiny])  # tanh(x) = x there
    m = fns[("expm1", prec)](np.array([-0.0, tiny], dtype=dtype))
    assert np.signbit(m[0]) and m[1] == tiny
    lg = fns[("log", prec)](np.array([tiny], dtype=dtype))
    assert lg[0] == np.log(np.longdouble(tiny)).astype(dtype)


def test_gcc_vectorizes_the_loops_that_call_them(tmp_path: Path) -> None:
    import subprocess

    from ocannl_ast.backends import compiler

    src = u.source().replace("int64_t n) {", "int64_t n) { n = 1024;")  # a constant extent
    (tmp_path / "v.c").write_text(src)
    flags = compiler.effective_flags(compiler.DEFAULT_OPT_FLAGS)
    proc = subprocess.run([compiler.CC, *flags, "-fopt-info-vec-optimized", "-o",
                           str(tmp_path / "v.so"), str(tmp_path / "v.c")],
                          capture_output=True, text=True, check=True)
    loops = [i + 1 for i, line in enumerate(src.splitlines()) if "out[i] =" in line]
    assert len(loops) == 2 * len(u.FUNCS)
    for line in loops:
        assert f"v.c:{line}:" in proc.stderr and "loop vectorized" in proc.stderr, (
            f"loop at line {line} not vectorized:\n{proc.stderr[-2000:]}")


def _sources(cache: Path) -> str:
    return "\n".join(p.read_text() for p in cache.rglob("*.c"))


@pytest.mark.parametrize("libm", [False, True])
def test_generated_code_uses_them_unless_libm(libm: bool, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path))
    if libm:
        monkeypatch.setenv("OCANNL_AST_LIBM", "1")
    xs = np.linspace(-3, 3, 64)
    x = oc.ndarray(xs)
    got = oc.Context(precision="float64").eval(oc.tanh(oc.exp(x) * 0.1) + oc.log(oc.exp(x)))
    want = np.tanh(np.exp(xs) * 0.1) + xs
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-14)
    src = _sources(tmp_path)
    for f in ("exp", "log", "tanh"):
        assert (f"ocannl_{f}_d(" in src) is not libm, f
        assert (f"{f}(" in src.replace(f"ocannl_{f}_d(", "")) is libm, f
