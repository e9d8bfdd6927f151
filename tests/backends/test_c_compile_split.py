"""A large C routine split into translation units compiled by parallel gcc processes
(`OCANNL_AST_CC_JOBS`, `c_backend.SPLIT_MIN_LINES`) gives the same bits as the one-unit
build; the cache key covers the units; a failing unit's error names its file."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from gcc_util import gcc_runs

import ocannl_ast as oc
from ocannl_ast.backends import c_backend, compiler
from ocannl_ast.errors import BackendError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import transformer_model as tm

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

X = np.random.default_rng(0).normal(size=(16, 6)).astype(np.float32)
Y = np.sin(X.sum(axis=1, keepdims=True)).astype(np.float32)


WIDTHS = (12, 12, 8, 1)


def init_weights() -> list[np.ndarray]:
    """w0, b0, w1, b1, ... of the MLP."""
    rng = np.random.default_rng(1)
    out, width_in = [], X.shape[1]
    for width in WIDTHS:
        out += [rng.normal(0, 0.5, (width, width_in)).astype(np.float32),
                rng.normal(0, 0.1, (width,)).astype(np.float32)]
        width_in = width
    return out


def mlp_step(ctx: oc.Context) -> tuple[oc.Routine, list[oc.Tensor], oc.Tensor]:
    """A 4-layer tanh MLP regression step with Adam: several functions, kernel calls."""
    ws = init_weights()
    h = oc.ndarray(X, batch_axes=1)
    params = []
    for i, width in enumerate(WIDTHS):
        w = oc.param(f"w{i}", output_dims=[width], input_dims=[ws[2 * i].shape[1]],
                     init=ws[2 * i])
        b = oc.param(f"b{i}", output_dims=[width], init=ws[2 * i + 1])
        params += [w, b]
        h = w @ h + b if width == 1 else oc.tanh(w @ h + b)
    d = h - oc.ndarray(Y, batch_axes=1)
    loss = oc.einsum("b|o=>o", d * d) * (1.0 / X.shape[0])
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])
    return step, params, loss


def run_mlp(steps: int = 3) -> tuple[list[np.ndarray], np.ndarray]:
    ctx = oc.Context()
    step, params, loss = mlp_step(ctx)
    for _ in range(steps):
        step()
    return [ctx.get(p).copy() for p in params], ctx.get(loss).copy()


@pytest.fixture
def split_all(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], Path]:
    """Split every routine of two or more functions (no size threshold); `use(jobs)` sets
    `OCANNL_AST_CC_JOBS` and a fresh cache directory, returned."""
    monkeypatch.setattr(c_backend, "SPLIT_MIN_LINES", 0)

    def use(jobs: str) -> Path:
        cache = tmp_path / f"jobs_{jobs}"
        monkeypatch.setenv("OCANNL_AST_CC_JOBS", jobs)
        monkeypatch.setenv("OCANNL_AST_CACHE", str(cache))
        return cache

    return use


def units_of(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.u*.c"))


def most_units(cache: Path) -> int:
    """The most translation units of one cache entry (routine) in `cache`."""
    return max(1 + len(list(cache.glob(so.stem + ".u*.c"))) for so in cache.glob("*.so"))


def test_split_mlp_step_same_bits(split_all: Callable[[str], Path]) -> None:
    one_cache = split_all("1")
    one = run_mlp()
    assert not units_of(one_cache)
    for jobs in ("2", "3"):
        cache = split_all(jobs)
        got = run_mlp()
        assert most_units(cache) == int(jobs), sorted(cache.iterdir())
        for a, b in zip(one[0], got[0]):
            assert np.array_equal(a, b)  # bit for bit
        assert np.array_equal(one[1], got[1])
    # and the values are right: the first loss against NumPy (from the initial weights)
    ctx = oc.Context()
    step, _, loss = mlp_step(ctx)
    ws = [w.astype(np.float64) for w in init_weights()]
    step()
    h = X.astype(np.float64).T
    for i in range(0, len(ws), 2):
        h = ws[i] @ h + ws[i + 1][:, None]
        h = h if i == len(ws) - 2 else np.tanh(h)
    want = np.mean((h.T - Y) ** 2)
    np.testing.assert_allclose(ctx.get(loss)[0], want, rtol=1e-5)


def test_split_transformer_step_same_bits(split_all: Callable[[str], Path]) -> None:
    cfg = tm.QUICK
    ids, tgt = tm.data(cfg)
    results = []
    for jobs in ("1", "2"):
        cache = split_all(jobs)
        ctx = oc.Context()
        step, loss, _ = tm.build_ocannl(cfg, ids, tgt, ctx)
        losses = []
        for i in range(3):
            step(batch=i % cfg.n_batches)
            losses.append(ctx.get(loss).copy())
        results.append((losses, [a.copy() for a in ctx.arrays.values()]))
        assert most_units(cache) == int(jobs)
    (l1, a1), (l2, a2) = results
    assert all(np.array_equal(x, y) for x, y in zip(l1, l2))
    assert len(a1) == len(a2) and all(np.array_equal(x, y) for x, y in zip(a1, a2))


def test_units_define_every_function_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(c_backend, "SPLIT_MIN_LINES", 0)
    ctx = oc.Context()
    _, _, loss = mlp_step(ctx)
    prog, _, _ = ctx.lower_code([oc.grad_update(loss)], name="mlp_grad")
    one = c_backend._render(prog, jobs=1)
    split = c_backend._render(prog, jobs=3)
    assert one.extra_units == () and len(split.extra_units) == 2
    define = re.compile(rf"^[^ /#].*\bint ({one.cname}_f\d+)\(.*\{{$", re.MULTILINE)
    want = sorted(define.findall(one.source))
    got = [name for text in (split.source, *split.extra_units) for name in define.findall(text)]
    assert len(want) >= 3 and sorted(got) == want
    # the kernel is defined in unit 0 only; the other units declare its entry point
    if "ocannl_mm_run_f(" in one.source:
        assert "OCK_RUN_LINKAGE" in split.source
        assert all("OCK_RUN_LINKAGE" not in u and "int ocannl_mm_run_f(" in u
                   for u in split.extra_units if "ocannl_mm_run_f(" in u)


def test_small_routines_stay_one_unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", "4")
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path))
    run_mlp(1)  # its routines are below SPLIT_MIN_LINES
    assert not units_of(tmp_path) and list(tmp_path.glob("*.so"))


def test_cache_reuses_and_verifies_every_unit(split_all: Callable[[str], Path],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    cache = split_all("2")
    first = run_mlp(1)
    runs = gcc_runs(monkeypatch)
    assert np.array_equal(run_mlp(1)[1], first[1])
    assert runs == []  # every unit and the .so verified: no gcc
    unit = units_of(cache)[0]
    unit.write_text(unit.read_text() + "\n/* edited */\n")
    assert np.array_equal(run_mlp(1)[1], first[1])
    assert len(runs) == 3  # the edited entry alone is rebuilt: two units and the link
    assert "/* edited */" not in unit.read_text()
    # a different unit count is a different cache entry (its key covers the units)
    split_before = {p.name for p in cache.glob("*.so")}
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", "3")
    run_mlp(1)
    assert {p.name for p in cache.glob("*.so")} > split_before


def test_failing_unit_names_its_file(split_all: Callable[[str], Path],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    cache = split_all("2")
    real = compiler._run_gcc

    def fail_unit1(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        if cmd[-1].endswith(".u1.c"):
            return subprocess.CompletedProcess(cmd, 1, "", f"{cmd[-1]}:3:1: error: injected")
        return real(cmd)

    monkeypatch.setattr(compiler, "_run_gcc", fail_unit1)
    with pytest.raises(BackendError) as info:
        run_mlp(1)
    msg = str(info.value)
    unit = units_of(cache)[0]
    assert f"on the generated file {unit}" in msg and "injected" in msg
    assert not list(cache.glob("*.so")) and not list(cache.glob(".*.tmp"))
    assert not list(cache.glob("*.o")) and not list(cache.glob(".*.o.*"))


def test_failing_real_gcc_in_split_build(split_all: Callable[[str], Path],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    cache = split_all("2")
    monkeypatch.setenv("OCANNL_AST_CFLAGS", "-O1 -fno-such-flag-ocannl")
    with pytest.raises(BackendError, match="fno-such-flag-ocannl") as info:
        run_mlp(1)
    # every unit fails; the error names the first in unit order: the one with the entry
    named = [p for p in cache.glob("*.c") if f"on the generated file {p}\n" in str(info.value)]
    assert len(named) == 1 and ".u" not in named[0].name


@pytest.mark.parametrize("bad", ["0", "-1", "two", "1.5"])
def test_bad_jobs_setting(bad: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", bad)
    with pytest.raises(BackendError, match="OCANNL_AST_CC_JOBS must be a positive count"):
        c_backend.cc_jobs()


def test_jobs_auto(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw in ("", "auto"):
        monkeypatch.setenv("OCANNL_AST_CC_JOBS", raw)
        assert 1 <= c_backend.cc_jobs() <= c_backend.MAX_AUTO_JOBS
    monkeypatch.setenv("OCANNL_AST_CC_JOBS", "5")
    assert c_backend.cc_jobs() == 5


def test_split_gradients(split_all: Callable[[str], Path],
                         monkeypatch: pytest.MonkeyPatch) -> None:
    cache = split_all("2")
    monkeypatch.setattr(c_backend, "FUNCTION_LINES", 6)  # many small functions to split
    rng = np.random.default_rng(3)
    a0, b0 = rng.normal(size=(5, 4)), rng.normal(size=(5, 4))
    xm = oc.ndarray(rng.normal(size=(5, 4)))

    def fn(a: oc.Tensor, b: oc.Tensor) -> oc.Tensor:
        h = oc.tanh(a * xm)
        return oc.einsum("ij;ij=>", h * h, oc.exp(b * 0.5) + a)

    oc.testing.check_grads(fn, [a0, b0])
    assert most_units(cache) == 2
