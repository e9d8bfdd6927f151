"""Test-suite wide setup: make `tests/` importable (golden_util) and verify IRs."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("OCANNL_AST_CHECK", "1")
