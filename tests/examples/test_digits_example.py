"""`python examples/digits.py`: the conv net reaches held-out accuracy >= 0.95 well within
2 minutes, reproduces its final loss bit for bit, writes its loss-curve PNG when matplotlib
imports (and runs without it), and says how to install scikit-learn when it is missing.

Needs the `examples` extra (scikit-learn, matplotlib), which scripts/setup.sh installs."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits.py"

# Run the example with some modules made unimportable (sys.modules[name] = None).
_WITHOUT = ("import runpy, sys\n"
            "for m in sys.argv[1].split(','): sys.modules[m] = None\n"
            "sys.argv = [sys.argv[2], *sys.argv[3:]]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n")


def _run(*args: str, without: str = "") -> subprocess.CompletedProcess[str]:
    cmd = ([sys.executable, "-c", _WITHOUT, without, str(EXAMPLE), *args] if without
           else [sys.executable, str(EXAMPLE), *args])
    return subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300)


def _field(out: str, name: str) -> str:
    m = re.search(rf"^{name}: (\S+)$", out, re.MULTILINE)
    assert m, f"no '{name}:' line in:\n{out}"
    return m.group(1)


def _epoch_losses(out: str) -> list[float]:
    return [float(x) for x in re.findall(r"^epoch +\d+ +loss (\S+)$", out, re.MULTILINE)]


def test_digits_default_run_reaches_095_and_reproduces(tmp_path: Path) -> None:
    png = tmp_path / "curve.png"
    start = time.perf_counter()
    first = _run("--plot", str(png))
    wall = time.perf_counter() - start
    assert first.returncode == 0, first.stderr
    assert float(_field(first.stdout, "accuracy")) >= 0.95
    assert wall < 120, f"digits took {wall:.1f}s"
    assert first.stdout.strip().splitlines()[-1].startswith("accuracy: ")
    losses = _epoch_losses(first.stdout)
    assert len(losses) == 12 and losses[-1] < 0.25 * losses[0], losses
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    second = _run("--plot", "")
    assert second.returncode == 0, second.stderr
    assert _field(first.stdout, "final loss") == _field(second.stdout, "final loss")
    assert _field(first.stdout, "accuracy") == _field(second.stdout, "accuracy")


def test_digits_short_run_other_seed_learns() -> None:
    out = _run("--epochs", "4", "--seed", "5", "--plot", "")
    assert out.returncode == 0, out.stderr
    assert float(_field(out.stdout, "accuracy")) >= 0.85  # 10 classes: chance is 0.1
    losses = _epoch_losses(out.stdout)
    assert len(losses) == 4 and losses[2] > losses[3] and losses[0] > losses[1] > losses[2], losses


def test_digits_without_matplotlib_skips_the_plot(tmp_path: Path) -> None:
    png = tmp_path / "curve.png"
    out = _run("--epochs", "1", "--plot", str(png), without="matplotlib")
    assert out.returncode == 0, out.stderr
    assert not png.exists()
    assert out.stdout.strip().splitlines()[-1].startswith("accuracy: ")


def test_digits_without_sklearn_says_how_to_install() -> None:
    out = _run("--epochs", "1", "--plot", "", without="sklearn")
    assert out.returncode != 0
    assert "scikit-learn" in out.stderr and "pip install" in out.stderr
    assert "Traceback" not in out.stderr
