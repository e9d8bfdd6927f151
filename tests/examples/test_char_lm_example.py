"""`python examples/char_lm.py`: the transformer LM example starts at a loss near ln(vocab),
learns, samples text, and a run resumed from its checkpoint ends bit for bit where an
uninterrupted run ends. Small settings keep it to seconds; the full default run (held-out
loss <= 2.2 in under 3 minutes on 2 cores) is the example's own claim, measured in the notes."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "char_lm.py"
SMALL = ["--d-model", "32", "--heads", "2", "--blocks", "1", "--context", "16",
         "--batch", "8", "--chars", "60000", "--samples", "1"]


def _run(tmp_path: Path, *args: str) -> str:
    cmd = [sys.executable, str(EXAMPLE), *SMALL,
           "--checkpoint", str(tmp_path / "lm.safetensors"), *args]
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def _final(out: str) -> float:
    m = re.search(r"^held-out loss: (\S+)$", out, re.MULTILINE)
    assert m, out[-2000:]
    return float(m.group(1))


def test_char_lm_learns_and_samples(tmp_path: Path) -> None:
    out = _run(tmp_path, "--steps", "120", "--eval-every", "60", "--save-every", "0")
    first = float(re.search(r"first held-out loss (\S+)", out).group(1))  # type: ignore[union-attr]
    vocab = int(re.search(r"vocabulary (\d+)", out).group(1))  # type: ignore[union-attr]
    assert abs(first - math.log(vocab)) < 0.5, (first, vocab)
    assert _final(out) < first - 1.0, out[-2000:]
    assert re.search(r"^sample: '", out, re.MULTILINE), out[-2000:]


def test_char_lm_resume_is_bit_for_bit(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    whole = _final(_run(tmp_path / "a", "--steps", "40", "--eval-every", "1000",
                        "--save-every", "0"))
    _run(tmp_path / "b", "--steps", "40", "--stop-at", "20", "--eval-every", "1000",
         "--save-every", "20")
    resumed = _run(tmp_path / "b", "--steps", "40", "--eval-every", "1000", "--save-every",
                   "20", "--resume")
    assert "resumed from" in resumed
    assert _final(resumed) == whole
