"""Test-suite wide setup: make `tests/` importable (golden_util) and verify IRs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OCANNL_AST_CHECK", "1")


def _share_kernel_objects() -> None:
    """Many tests compile into a temporary cache of their own (``OCANNL_AST_CACHE``); each
    such cache would compile the contraction kernel object again (seconds of gcc). The
    objects are named by a digest of their source and flags and checked against their own
    digests, so every cache of the run (and every pytest-xdist worker) shares the object
    directory of the cache the run starts with. Tests of where the objects go unset it."""
    from ocannl_ast import config

    os.environ.setdefault("OCANNL_AST_OBJECT_CACHE", str(config.c_cache_dir() / "shared"))


_share_kernel_objects()


import pytest

from ocannl_ast.infer.solver import Solver


@pytest.fixture
def solver() -> Solver:
    """A solver of its own: shapes made with ``Shape.make(..., solver=solver)`` share no state
    with any other test. (There is no process-wide solver: every shape starts its own
    component and operations merge them; ids come from one counter and never collide.)"""
    return Solver()
