"""Smoke test of the benchmark suite (benchmarks/): each benchmark runs at tiny sizes and
produces well-formed rows; the suite's table prints. Nothing here asserts on speed."""

from __future__ import annotations

import importlib
import importlib.util
import io
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

common = importlib.import_module("common")
run_all = importlib.import_module("run_all")

_NUMBER = re.compile(r"\d")


@pytest.fixture(scope="module")
def rows_of(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list]:
    """Every benchmark run once with --quick sizes, made tinier still."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(importlib.import_module("bench_compile"), "QUICK_DEPTHS", (2, 3))
        mp.setattr(importlib.import_module("bench_import"), "QUICK_REPEATS", 1)
        mp.setenv("OCANNL_AST_CACHE", str(tmp_path_factory.mktemp("cache")))
        return {name: bench(True) for name, bench in run_all.BENCHMARKS.items()}


@pytest.mark.parametrize("name", list(run_all.BENCHMARKS))
def test_each_benchmark_produces_rows(name: str, rows_of: dict[str, list]) -> None:
    rows = rows_of[name]
    assert rows, f"{name}: no rows"
    for r in rows:
        assert isinstance(r, common.Row)
        assert r.group and r.figure and r.measured
        assert r.met is None or isinstance(r.met, bool)
    assert any(r.group.startswith(name) for r in rows)
    timed = [r for r in rows if "skipped" not in r.measured and "thread control" not in r.figure]
    assert timed and all(_NUMBER.search(r.measured) for r in timed), [r.measured for r in timed]


def test_moons_rows_cover_every_implementation(rows_of: dict[str, list]) -> None:
    for batch in (20, 200):
        figures = {r.figure for r in rows_of["moons"] if r.group == f"moons B={batch}"}
        for impl in ("ocannl_ast routine", "ocannl_ast kernel", "hand-fused C", "numpy"):
            assert f"{impl} per step" in figures
        assert "torch eager / ocannl routine (speedup)" in figures  # measured or skipped


def test_transformer_rows_compare_jax_where_installed(rows_of: dict[str, list]) -> None:
    rows = {r.figure: r for r in rows_of["transformer"]}
    if "torch eager / ocannl step" in rows:
        pytest.skip("torch is not installed: the transformer benchmark has no rows to check")
    jax_row = rows["ocannl / jax.jit, 1 thread"]
    if importlib.util.find_spec("jax") is None:
        assert jax_row.measured.startswith("skipped: jax is not installed")
        return
    # measured in its worker, after the first losses matched ocannl's
    assert jax_row.measured.endswith("x") and jax_row.met is not None, jax_row
    assert float(rows["first 3 losses vs jax.jit (max rel. diff)"].measured) <= 1e-4


def test_compile_rows_split_python_and_gcc(rows_of: dict[str, list]) -> None:
    rows = rows_of["compile"]
    gcc = [r.figure for r in rows if r.group == "compile MLP L=3" and r.figure.startswith("gcc")]
    # "gcc (N C file(s) ...) | load": the routine may be split into translation units
    assert len(gcc) == 1 and gcc[0].endswith("| load"), gcc
    growth = [r for r in rows if r.figure.startswith("python side growth")]
    assert len(growth) == 1 and math.isfinite(float(growth[0].measured.split("=")[1]))


def test_compile_depth_over_limit_is_reported_not_raised() -> None:
    rows = importlib.import_module("bench_compile").run(True, limit=0.01)
    assert rows[0].measured.startswith("> 0.01 s")
    assert [r.measured for r in rows[1:]] == ["not run"]


def test_run_all_prints_one_table(capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.import_module("bench_import"), "QUICK_REPEATS", 1)
    # main() pops OCANNL_AST_CHECK from os.environ; delenv here so monkeypatch puts it back
    # (else every later test runs with checks off)
    monkeypatch.delenv("OCANNL_AST_CHECK", raising=False)
    rows = run_all.main(["--quick", "--only", "import"])
    out = capsys.readouterr().out
    assert out.count("| status") == 1
    assert all(f"[{r.group}] {r.figure}" in out for r in rows)
    assert all(r.met is None for r in rows)  # --quick judges no target


def test_measure_and_ratio_rows() -> None:
    calls: list[int] = []
    st = common.measure(calls.append, rounds=3, round_s=0.001)
    assert 0 < st.lo <= st.median <= st.hi
    assert calls[0] == 0 and max(calls) >= 1  # fn gets the call number
    assert common.ratio_row("g", "f", 2.0, at_most=1.3).met is False
    assert common.ratio_row("g", "f", 0.7, at_least=0.6).met is True
    buf = io.StringIO()
    common.print_table([common.Row("g", "f", "1 us")], out=buf)
    assert "[g] f" in buf.getvalue()


def test_hand_routine_matches_numpy() -> None:
    src = ("int axpy(float *restrict y, float *restrict x, int64_t n) {\n"
           "  for (int64_t i = 0; i < n; i++) y[i] += 2.0f * x[i];\n  return 0;\n}\n")
    r = common.HandRoutine("#include <stdint.h>\n" + src, "axpy", n_arrays=2, n_static=1)
    y, x = np.ones(5, np.float32), np.arange(5, dtype=np.float32)
    r([y, x], (5,))
    np.testing.assert_array_equal(y, 1 + 2 * np.arange(5))
