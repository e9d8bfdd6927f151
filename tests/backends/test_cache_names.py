"""Routine names come from what the routine computes, not from what the process built before
(issue 18 item 5): the same program, built after a different set of earlier programs and in a
fresh process, is the same source and hits the compile cache (zero gcc runs).

Each run is a fresh Python process counting the gcc runs of the compile cache
(`backends.compiler._run_gcc`) while it builds and runs programs; values are checked against
NumPy so a cache hit on a wrong entry would show."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

CHILD = r"""
import json, sys
import numpy as np
import ocannl_ast as oc
from ocannl_ast.backends import compiler

runs = []
_real = compiler._run_gcc
def counting(cmd):
    runs.append(cmd)
    return _real(cmd)
compiler._run_gcc = counting

X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], np.float32)

def program_a():
    # a training step compiled without a name (params initialized by their own routine),
    # then an eval of the loss: three routines, none named by the caller
    ctx = oc.Context()
    x = oc.ndarray(X, batch_axes=1)
    w = oc.param("w", output_dims=[4], init=np.full((4, 3), 0.1, np.float32))
    loss = oc.einsum("b|o=>o", oc.relu(w @ x) * oc.relu(w @ x))
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)])
    step()
    return float(ctx.eval(loss).sum())

def program_b():
    return float(oc.eval(oc.einsum("ij=>", oc.tanh(oc.ndarray(X)) * 3.0)))

def program_c():
    return float(oc.eval(oc.einsum("ij=>", oc.exp(oc.ndarray(X)) - 2.0)))

out = []
for which in sys.argv[1]:
    before = len(runs)
    value = {"a": program_a, "b": program_b, "c": program_c}[which]()
    out.append({"program": which, "gcc": len(runs) - before, "value": value})
print(json.dumps(out))
"""


def _expected() -> dict[str, float]:
    w = np.full((4, 3), 0.1)
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    h = x @ w.T  # (2, 4)
    grad_w = (2 * np.maximum(h, 0) * (h > 0)).T @ x  # d/dw sum(relu(h)^2)
    h2 = x @ (w - 0.1 * grad_w).T
    return {"a": float((np.maximum(h2, 0) ** 2).sum()),
            "b": float((np.tanh(x) * 3).sum()), "c": float((np.exp(x) - 2).sum())}


def _run(cache: Path, order: str) -> list[dict[str, float]]:
    env = {**os.environ, "OCANNL_AST_CACHE": str(cache), "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-c", CHILD, order], capture_output=True, text=True,
                          env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    want = _expected()
    for r in results:
        assert r["value"] == pytest.approx(want[r["program"]], rel=1e-5), r
    return results


def test_same_program_hits_the_cache_whatever_ran_before(tmp_path: Path) -> None:
    first = _run(tmp_path, "ab")
    assert first[0]["gcc"] >= 1 and first[1]["gcc"] >= 1  # a cold cache compiles
    # a fresh process: a program never built before, then `a` again (ids and counters now
    # differ from the first process's), then `b`, then `a` once more in the same process
    again = _run(tmp_path, "caba")
    assert again[0]["gcc"] >= 1, "program c is new: it must be compiled"
    assert [r["gcc"] for r in again[1:]] == [0, 0, 0], again


def test_different_programs_get_different_names(tmp_path: Path) -> None:
    import ocannl_ast as oc

    x = np.ones((2, 3), np.float32)
    a = oc.Context().compile(oc.relu(oc.ndarray(x)) * 2.0)
    b = oc.Context().compile(oc.relu(oc.ndarray(x)) * 3.0)
    a2 = oc.Context().compile(oc.relu(oc.ndarray(x)) * 2.0)
    assert a.name != b.name
    assert a.name == a2.name
