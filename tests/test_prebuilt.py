"""What an installation keeps prebuilt (`config.prebuilt_dir`, ``python -m
ocannl_ast.prebuilt``, run by scripts/setup.sh): the contraction kernel's objects and the
library's rewritten @op/@cd functions, read (never written) by routines compiled into any
compile cache, so that a fresh cache compiles only the routine. A damaged or foreign entry
there is ignored and built into the cache as before; ``OCANNL_AST_PREBUILT=off`` ignores
the directory."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from gcc_util import gcc_runs

import ocannl_ast as oc
from ocannl_ast import config
from ocannl_ast.backends import prebuild
from ocannl_ast.lowering.loop_ir import Precision

gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")
RNG = np.random.default_rng(5)
A = RNG.normal(size=(24, 40)).astype(np.float32)
B = RNG.normal(size=(40, 32)).astype(np.float32)


def product() -> tuple[np.ndarray, np.ndarray]:
    """(ours, NumPy's float64 reference) of a matmul large enough for the kernel."""
    c = oc.einsum("ij;jk=>ik", oc.ndarray(A), oc.ndarray(B))
    return oc.Context().eval(c), A.astype(np.float64) @ B.astype(np.float64)


def test_default_is_inside_the_package_and_off_turns_it_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OCANNL_AST_PREBUILT", raising=False)
    assert config.prebuilt_dir() == Path(oc.__file__).resolve().parent / "_prebuilt"
    for off in ("off", "0", ""):
        monkeypatch.setenv("OCANNL_AST_PREBUILT", off)
        assert config.prebuilt_dir() is None


@gcc
def test_routines_link_the_prebuilt_kernel_object_and_ignore_a_damaged_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh compile cache compiles only the routine: the kernel object comes from the
    prebuilt directory (same numbers as NumPy). Truncated there, it is not used: the
    routine builds its own into the cache and the numbers stay right."""
    pre = tmp_path / "pre"
    monkeypatch.setenv("OCANNL_AST_PREBUILT", str(pre))
    monkeypatch.delenv("OCANNL_AST_OBJECT_CACHE", raising=False)
    threads = [False] if os.environ.get("OCANNL_AST_THREADS", "1") in ("", "1") else [True]
    (obj,) = prebuild.prebuild(objects_dir=pre / "objects", precisions=[Precision.FLOAT32],
                               openmp=threads)
    assert obj.parent == pre / "objects" and obj.is_file()
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "fresh"))
    runs = gcc_runs(monkeypatch)
    got, want = product()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not any(c.endswith(".c") and "ocannl_shared" in c for r in runs for c in r)
    assert any(str(obj) in r for r in runs)  # linked from the prebuilt directory
    assert not (tmp_path / "fresh" / "shared").exists()

    obj.write_bytes(obj.read_bytes()[:100])  # damaged: its digest no longer matches
    runs.clear()
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "second"))
    got, want = product()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not any(str(obj) in r for r in runs)
    assert list((tmp_path / "second" / "shared").glob("*.o"))


def _import_fresh(path: Path, name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_rewrites_are_read_from_the_prebuilt_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite stored in the prebuilt ``rewrite/`` is found with an empty rewrite cache:
    the decorated function is not rewritten again (libcst is not called), and it computes
    what it did."""
    from ocannl_ast.rewrite import decorator, rewriter

    src = tmp_path / "prebuilt_user_mod.py"
    src.write_text(textwrap.dedent("""
        import ocannl_ast as oc
        from ocannl_ast import op

        @op
        def double_plus(x):
            return 2.0 * x + 1.0
    """))
    pre = tmp_path / "pre"
    monkeypatch.setenv("OCANNL_AST_PREBUILT", str(pre))
    monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", str(pre / "rewrite"))
    decorator.materialize_deferred()  # the library's own: built once per process anyway
    decorator.clear_cache()
    first = _import_fresh(src, "prebuilt_user_mod_a")
    assert list((pre / "rewrite").rglob("*.bin"))

    monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", str(tmp_path / "empty"))
    decorator.clear_cache()

    def no_rewrite(*args: object, **kwargs: object) -> object:
        raise AssertionError("rewritten again: the prebuilt rewrite was not read")

    monkeypatch.setattr(rewriter, "rewrite_function", no_rewrite)
    second = _import_fresh(src, "prebuilt_user_mod_b")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for mod in (first, second):
        got = oc.Context().eval(mod.double_plus(oc.ndarray(x)))  # type: ignore[attr-defined]
        np.testing.assert_allclose(got, 2.0 * x + 1.0)
    assert not (tmp_path / "empty").exists() or not list((tmp_path / "empty").rglob("*.bin"))


def test_prebuilt_command_rewrites_the_library(tmp_path: Path) -> None:
    """``python -m ocannl_ast.prebuilt --what rewrite`` stores a rewrite of every library
    @op/@cd function: a second run stores nothing new."""
    env = {**os.environ, "OCANNL_AST_CACHE": str(tmp_path / "cache")}
    env.pop("OCANNL_AST_REWRITE_CACHE", None)
    cmd = [sys.executable, "-m", "ocannl_ast.prebuilt", "--dir", str(tmp_path / "pre"),
           "--what", "rewrite"]
    subprocess.run(cmd, check=True, env=env, timeout=300)
    entries = sorted((tmp_path / "pre" / "rewrite").rglob("*.bin"))
    assert len(entries) >= 20
    subprocess.run(cmd, check=True, env=env, timeout=300)
    assert sorted((tmp_path / "pre" / "rewrite").rglob("*.bin")) == entries
