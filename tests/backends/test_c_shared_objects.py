"""The contraction kernel is compiled once per cache directory into a shared object file
(`compiler.ensure_object`) and linked into every routine that calls it, instead of being
compiled again in each routine's source; a context starts building it in the background
before it lowers (`CBackend.prepare`). Same numbers as NumPy; a damaged object is rebuilt;
a build already running is waited for, not repeated."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from gcc_util import gcc_runs

import ocannl_ast as oc
from ocannl_ast.backends import c_backend, compiler
from ocannl_ast.errors import BackendError

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

RNG = np.random.default_rng(3)
A = RNG.normal(size=(24, 40)).astype(np.float32)
B = RNG.normal(size=(40, 32)).astype(np.float32)


def product(scale: float) -> tuple[np.ndarray, np.ndarray]:
    """(ours, NumPy's float64 reference) of a matmul large enough for the kernel."""
    c = oc.einsum("ij;jk=>ik", oc.ndarray(A), oc.ndarray(B)) * scale
    want = (A.astype(np.float64) @ B.astype(np.float64)) * scale
    return oc.Context().eval(c), want


def objects(cache: Path) -> list[Path]:
    return sorted((cache / "shared").glob("*.o"))


@pytest.fixture(autouse=True)
def _objects_in_each_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Objects in each cache's own ``shared/`` (the suite's conftest shares one object
    directory between caches, ``OCANNL_AST_OBJECT_CACHE``: unset here; nor the
    installation's prebuilt objects, ``OCANNL_AST_PREBUILT``: off here)."""
    monkeypatch.delenv("OCANNL_AST_OBJECT_CACHE", raising=False)
    monkeypatch.setenv("OCANNL_AST_PREBUILT", "off")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path))
    return tmp_path


def test_object_cache_shared_by_two_caches(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """``OCANNL_AST_OBJECT_CACHE``: the kernel object is compiled once into that directory
    and linked from there into the routines of two other caches; same numbers."""
    objects_dir = tmp_path / "objects"
    monkeypatch.setenv("OCANNL_AST_OBJECT_CACHE", str(objects_dir))
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "one"))
    got, want = product(1.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    (obj,) = objects_dir.glob("*.o")
    runs = gcc_runs(monkeypatch)
    monkeypatch.setenv("OCANNL_AST_CACHE", str(tmp_path / "two"))
    got, want = product(4.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert runs and not any(str(obj.with_suffix(".c")) in r for r in runs)  # not compiled
    assert any(str(obj) in r for r in runs)  # linked from the shared directory
    assert list(objects_dir.glob("*.o")) == [obj]
    assert list((tmp_path / "two").glob("*.so")) and not (tmp_path / "two" / "shared").exists()
    assert not (tmp_path / "one" / "shared").exists()


def test_kernel_compiled_once_and_linked(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    got, want = product(1.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert len(objects(cache)) == 1
    runs = gcc_runs(monkeypatch)
    got, want = product(2.0)  # another routine: its own source, the same kernel object
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert runs and not any(c.endswith(".c") and "shared" in c for r in runs for c in r)
    assert any(all(str(o) in r for o in objects(cache)) for r in runs)  # linked, not rebuilt


def test_routine_sources_leave_the_kernel_out() -> None:
    c = oc.einsum("ij;jk=>ik", oc.ndarray(A), oc.ndarray(B))
    prog, _, _ = oc.Context().lower_code(c.forward)
    units, _, shared = c_backend.render_c_units(prog, jobs=1)
    assert len(shared) == 1 and "ocannl_mm_gemm_f(" in shared[0]
    assert "ocannl_mm_gemm_f(" not in units[0] and "int ocannl_mm_run_f(" in units[0]
    assert "ocannl_mm_gemm_f(" in c_backend.render_c(prog)  # oc.render: one whole file


def test_damaged_object_is_rebuilt(cache: Path) -> None:
    product(1.0)
    obj = objects(cache)[0]
    good = obj.read_bytes()
    obj.write_bytes(b"garbage")
    got, want = product(3.0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert obj.read_bytes() == good  # gcc is deterministic


def test_running_build_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = "int ocannl_shared_probe(int x) { return x + 1; }\n"
    flags = compiler.effective_flags(("-O1",))
    runs = gcc_runs(monkeypatch)
    compiler.prebuild_object(tmp_path, source, flags)
    path = compiler.object_path(tmp_path, source, flags)
    compiler.ensure_object(path, source, flags)
    assert path.is_file() and len(runs) == 1
    compiler.prebuild_object(tmp_path, source, flags)  # cached: nothing started
    compiler.ensure_object(path, source, flags)
    assert len(runs) == 1


def test_failed_prebuild_is_reported_by_the_build_that_needs_it(tmp_path: Path) -> None:
    source = "this is not C;\n"
    flags = compiler.effective_flags(("-O1",))
    compiler.prebuild_object(tmp_path, source, flags)  # fails quietly in the background
    path = compiler.object_path(tmp_path, source, flags)
    with pytest.raises(BackendError, match="failed"):
        compiler.ensure_object(path, source, flags)
    assert not path.exists()


def test_units_balanced_by_lines_of_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A part's comment lines (its notes on virtual and constant tensors) weigh nothing when
    parts are shared between translation units: gcc spends no time on them."""
    monkeypatch.setattr(c_backend, "SPLIT_MIN_LINES", 0)
    notes = tuple(f"  /* virtual: t{k} (inlined into 1 read) */" for k in range(400))
    code = tuple(f"  x[{k}] = 0.0f;" for k in range(100))

    def part(body: tuple[str, ...]) -> c_backend._Part:
        return c_backend._Part(body, (), (), False)

    parts = [part(notes + code[:10]), part(code), part(code), part(code[:80])]
    groups = c_backend._groups(parts, False, 2)
    loads = [sum(c_backend._code_lines(parts[k].body) for k in g) for g in groups]
    assert sorted(k for g in groups for k in g) == [0, 1, 2, 3]
    assert max(loads) - min(loads) <= 100  # by all lines: part 0 alone (10 lines of code)
    assert c_backend._code_lines(notes + code) == 100


def test_prebuilt_kernel_objects_are_the_ones_routines_link(
        cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``python -m ocannl_ast.backends.prebuild`` (run by scripts/setup.sh) leaves in the
    cache exactly the objects a routine links: it then compiles only its own source."""
    from ocannl_ast.backends import prebuild
    from ocannl_ast.lowering.loop_ir import Precision

    assert prebuild.main(["--precision", "float32"]) == 0
    built = prebuild.prebuild(cache, [Precision.FLOAT32], [False])
    assert len(built) == 1 and all(p.is_file() for p in built)
    runs = gcc_runs(monkeypatch)
    got, want = product(1.5)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not any(c.endswith(".c") and "shared" in c for r in runs for c in r)
    assert any(all(str(p) in r for p in built) for r in runs)
    assert len(objects(cache)) == 2  # float32, without and with OpenMP
