"""Watching the C backend's gcc runs in a test: `gcc_runs(monkeypatch)` records the command
line of every gcc run from then on (they still run)."""

from __future__ import annotations

import subprocess

import pytest

from ocannl_ast.backends import compiler


def gcc_runs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The list every later gcc command line is appended to (in the order they start)."""
    runs: list[list[str]] = []
    real = compiler._run_gcc

    def counting(cmd: list[str]) -> subprocess.CompletedProcess[str]:
        runs.append(cmd)
        return real(cmd)

    monkeypatch.setattr(compiler, "_run_gcc", counting)
    return runs
