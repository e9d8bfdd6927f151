"""Golden files for printed IRs and generated code: compare text to ``tests/golden/<name>``.

Set ``OCANNL_AST_REGEN_GOLDEN=1`` to (re)write the files instead; review them as diffs.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

import pytest

GOLDEN_DIR = Path(__file__).resolve().parent / "golden"
REGEN_ENV = "OCANNL_AST_REGEN_GOLDEN"


def assert_golden(name: str, text: str) -> None:
    """Fail unless `text` equals the golden file `name` (regenerate it when REGEN_ENV=1)."""
    path = GOLDEN_DIR / name
    if os.environ.get(REGEN_ENV) == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"golden file {path} is missing: run with {REGEN_ENV}=1 to create it")
    expected = path.read_text()
    if text != expected:
        diff = "".join(
            difflib.unified_diff(
                expected.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"golden/{name}",
                tofile="actual",
            )
        )
        pytest.fail(f"output differs from golden/{name} ({REGEN_ENV}=1 regenerates):\n{diff}")
