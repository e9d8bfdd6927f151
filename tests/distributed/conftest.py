"""Helpers of the distributed tests: run `dp_script.py` alone (a world of one) or under the
launcher with 2 ranks on this machine (loopback only), each with a hard timeout."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
SCRIPT = HERE / "dp_script.py"
#: no test process may outlive this (seconds): nothing hangs CI
HARD_TIMEOUT = 80


def _has_mpi() -> bool:
    beside = Path(sys.executable).parent / "mpirun"
    return (importlib.util.find_spec("mpi4py") is not None
            and (beside.exists() or shutil.which("mpirun") is not None))


needs_mpi = pytest.mark.skipif(not _has_mpi(), reason="the `dist` extra (mpi4py, Open MPI) "
                               "is not installed: pip install '.[dist]'")


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return e


def run(cmd: list[str], cwd: Path, timeout: float = HARD_TIMEOUT
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True,
                          timeout=timeout, check=False)


def alone(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The script as a plain run: a world of one."""
    return run([sys.executable, str(SCRIPT), *args], cwd)


def launch(cwd: Path, *args: str, n: int = 2, script: Path = SCRIPT,
           launcher_args: tuple[str, ...] = ("--timeout", "70")
           ) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "ocannl_ast.distributed.launch", "-n", str(n),
                *launcher_args, str(script), *args], cwd)


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def params(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as f:
        return {k: f[k] for k in f.files}
