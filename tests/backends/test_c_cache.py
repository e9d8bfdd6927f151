"""The compile cache survives damage: truncated, swapped, garbage or missing files are
detected (digests of the source and the .so bytes) and rebuilt; an unusable cache directory
falls back to a private temporary one with a warning. Each run is a fresh Python process
(a damaged shared object could kill it), computing values checked against NumPy.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ocannl_ast.backends.compiler import CacheEntry, entry_is_valid

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

X = np.array([[-1.5, 0.0, 2.0], [3.0, -0.5, 0.25]], np.float32)

CHILD = """
import json, sys
import numpy as np
import ocannl_ast as oc
x = np.array(json.loads(sys.argv[1]), np.float32)
out = {"relu": oc.eval(oc.relu(oc.ndarray(x)) * 2.0).tolist(),
       "exp": oc.eval(oc.exp(oc.ndarray(x)) + 1.0).tolist()}
if len(sys.argv) > 2:  # one more routine, never compiled before
    out["tanh"] = oc.eval(oc.tanh(oc.ndarray(x)) - 0.5).tolist()
print(json.dumps(out))
"""


def _drop_dac_caps() -> None:
    """As root, drop the capabilities that ignore file permissions (before exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def start_child(cache: Path, *, new_routine: bool = False,
                unprivileged: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "OCANNL_AST_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("OCANNL_AST_CFLAGS", None)
    cmd = [sys.executable, "-c", CHILD, json.dumps(X.tolist())] + (["new"] if new_routine else [])
    preexec: Callable[[], None] | None = None
    if unprivileged and os.geteuid() == 0:
        preexec = _drop_dac_caps
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, preexec_fn=preexec)


def finish(child: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    out, err = child.communicate(timeout=300)
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def run_child(cache: Path, **kw: bool) -> subprocess.CompletedProcess[str]:
    return finish(start_child(cache, **kw))


def check_values(proc: subprocess.CompletedProcess[str]) -> None:
    """The child exited normally and printed the right numbers."""
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    np.testing.assert_array_equal(np.array(got["relu"], np.float32), np.maximum(X, 0) * 2)
    np.testing.assert_allclose(np.array(got["exp"], np.float32), np.exp(X) + 1, rtol=1e-6)
    if "tanh" in got:
        np.testing.assert_allclose(np.array(got["tanh"], np.float32), np.tanh(X) - 0.5,
                                   rtol=1e-6, atol=1e-7)


def snapshot(cache: Path) -> dict[str, bytes]:
    """The compile cache's files (subdirectories such as `rewrite/` belong to other caches)."""
    return {p.name: p.read_bytes() for p in sorted(cache.iterdir())
            if p.is_file() and not p.name.startswith(".")}


@pytest.fixture(scope="module")
def warm_once(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    """A cache filled by one good run, and its files."""
    cache = tmp_path_factory.mktemp("warm") / "cache"
    proc = run_child(cache)
    check_values(proc)
    assert "Warning" not in proc.stderr
    files = snapshot(cache)
    assert len([n for n in files if n.endswith(".so")]) >= 2
    assert {Path(n).suffix for n in files} == {".c", ".so", ".json"}
    return cache, files


@pytest.fixture
def warm(warm_once: tuple[Path, dict[str, bytes]], tmp_path: Path) -> tuple[Path, dict[str, bytes]]:
    """A private copy of the warm cache."""
    cache = tmp_path / "cache"
    shutil.copytree(warm_once[0], cache)
    return cache, warm_once[1]


def assert_rebuilt(cache: Path, original: dict[str, bytes]) -> None:
    """The same entries as the warm cache, each whole again: same source, digests matching."""
    files = snapshot(cache)
    assert sorted(files) == sorted(original)
    for name, data in files.items():
        if name.endswith(".c"):
            assert data == original[name]
            stem = cache / name[:-2]
            entry = CacheEntry(stem.with_suffix(".c"), stem.with_suffix(".so"),
                               stem.with_suffix(".json"))
            assert entry_is_valid(entry, data.decode()), name
        elif name.endswith(".so") and os.environ.get("OCANNL_AST_SANITIZE") != "1":
            assert data == original[name]  # bit for bit (gcc is deterministic; no -g paths)


def sos(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.so"))


def _truncate_half(cache: Path) -> None:
    for so in sos(cache):
        so.write_bytes(so.read_bytes()[: so.stat().st_size // 2])


def _truncate_empty(cache: Path) -> None:
    for so in sos(cache):
        so.write_bytes(b"")


def _garbage(cache: Path) -> None:
    rng = np.random.default_rng(0)
    for so in sos(cache):
        so.write_bytes(rng.integers(0, 256, so.stat().st_size, dtype=np.uint8).tobytes())


def _garbage_keep_elf_header(cache: Path) -> None:
    for so in sos(cache):
        data = bytearray(so.read_bytes())
        data[64:] = bytes(len(data) - 64)  # a valid-looking ELF header, zeroed body
        so.write_bytes(bytes(data))


def _swap_two(cache: Path, suffixes: tuple[str, ...]) -> None:
    stems = sorted({p.stem for p in sos(cache)}, key=lambda s: -(cache / f"{s}.so").stat().st_size)
    a, b = stems[0], stems[-1]
    for suffix in suffixes:
        pa, pb = cache / f"{a}{suffix}", cache / f"{b}{suffix}"
        da, db = pa.read_bytes(), pb.read_bytes()
        assert da != db
        pa.write_bytes(db)
        pb.write_bytes(da)


def _delete(suffix: str) -> Callable[[Path], None]:
    def run(cache: Path) -> None:
        for p in cache.glob(f"*{suffix}"):
            p.unlink()

    return run


def _garbage_meta(cache: Path) -> None:
    for p in cache.glob("*.json"):
        p.write_text("{not json")


DAMAGE: dict[str, Callable[[Path], None]] = {
    "truncate_half": _truncate_half,
    "truncate_empty": _truncate_empty,
    "garbage_bytes": _garbage,
    "zeroed_body": _garbage_keep_elf_header,
    "swap_so": lambda c: _swap_two(c, (".so",)),
    "swap_so_and_digests": lambda c: _swap_two(c, (".so", ".json")),
    "swap_c_files": lambda c: _swap_two(c, (".c",)),
    "delete_digests": _delete(".json"),
    "delete_so": _delete(".so"),
    "garbage_digests": _garbage_meta,
}


@pytest.fixture(scope="module")
def damaged_runs(warm_once: tuple[Path, dict[str, bytes]], tmp_path_factory: pytest.TempPathFactory
                 ) -> dict[str, tuple[Path, subprocess.CompletedProcess[str]]]:
    """Each damage applied to its own copy of the warm cache, then one run on each (the runs
    go concurrently: each is a separate process, so a crash stays in its own case)."""
    children: dict[str, tuple[Path, subprocess.Popen[str]]] = {}
    for name, damage in DAMAGE.items():
        cache = tmp_path_factory.mktemp(name) / "cache"
        shutil.copytree(warm_once[0], cache)
        damage(cache)
        children[name] = (cache, start_child(cache))
    return {name: (cache, finish(child)) for name, (cache, child) in children.items()}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_entries_are_rebuilt(warm_once: tuple[Path, dict[str, bytes]],
                                     damaged_runs: dict[str, tuple[Path, Any]],
                                     damage: str) -> None:
    cache, proc = damaged_runs[damage]
    check_values(proc)  # before the fix: SIGBUS, wrong values, or an error on every run
    assert "Warning" not in proc.stderr
    assert_rebuilt(cache, warm_once[1])


def test_cache_dir_is_a_file(tmp_path: Path) -> None:
    for cache in (tmp_path / "plain_file", tmp_path / "plain_file" / "below"):
        (tmp_path / "plain_file").write_text("not a directory")
        proc = run_child(cache, new_routine=True)
        check_values(proc)
        assert "RuntimeWarning" in proc.stderr and "is unusable" in proc.stderr, proc.stderr
        assert str(cache) in proc.stderr and "private directory" in proc.stderr
        assert (tmp_path / "plain_file").read_text() == "not a directory"


def _unwritable(directory: Path) -> bool:
    probe = [sys.executable, "-c", f"open({str(directory / 'probe')!r}, 'w')"]
    preexec = _drop_dac_caps if os.geteuid() == 0 else None
    proc = subprocess.run(probe, check=False, capture_output=True, preexec_fn=preexec)
    return proc.returncode != 0


@pytest.mark.parametrize("damaged", [False, True], ids=["intact", "damaged"])
def test_read_only_cache_dir(warm: tuple[Path, dict[str, bytes]], damaged: bool) -> None:
    cache, original = warm
    if damaged:
        _truncate_half(cache)
    os.chmod(cache, 0o555)
    try:
        assert _unwritable(cache)  # the set-up really denies writes (also as root)
        proc = run_child(cache, new_routine=True, unprivileged=True)
        check_values(proc)
        assert "is unusable" in proc.stderr and str(cache) in proc.stderr, proc.stderr
        assert proc.stderr.count("is unusable") == 1  # warned once per process
        if not damaged:
            assert snapshot(cache) == original  # intact entries were used, nothing written
        proc = run_child(cache, unprivileged=True)  # only cached routines
        check_values(proc)
        assert ("is unusable" in proc.stderr) == damaged
    finally:
        os.chmod(cache, 0o755)
