"""Test-suite wide setup: make `tests/` importable (golden_util) and verify IRs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OCANNL_AST_CHECK", "1")


import pytest

from ocannl_ast.infer.solver import Solver


@pytest.fixture
def solver() -> Solver:
    """A solver of its own: shapes made with ``Shape.make(..., solver=solver)`` share no state
    with any other test. (There is no process-wide solver: every shape starts its own
    component and operations merge them; ids come from one counter and never collide.)"""
    return Solver()
