"""The README's main command: the moons example trains to >= 0.97 accuracy, and the same
seed reproduces the same final loss bit for bit (two separate processes)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "moons.py"


def _run(*args: str) -> str:
    out = subprocess.run([sys.executable, str(EXAMPLE), "--plot", "", *args],
                         capture_output=True, text=True, timeout=300, check=True)
    return out.stdout


def test_moons_trains_and_reproduces_bit_for_bit() -> None:
    first, second = _run(), _run()
    acc = float(re.search(r"^accuracy: ([0-9.]+)$", first, re.MULTILINE).group(1))  # type: ignore[union-attr]
    assert acc >= 0.97
    loss1 = re.search(r"^final loss: (\S+)$", first, re.MULTILINE).group(1)  # type: ignore[union-attr]
    loss2 = re.search(r"^final loss: (\S+)$", second, re.MULTILINE).group(1)  # type: ignore[union-attr]
    assert loss1 == loss2
    assert first.strip().splitlines()[-1].startswith("accuracy: ")
