"""`examples/moons.py --backend cuda` on the driver emulator (each run in its own process, so
parameter ids, and hence initial values, are those of a plain run): it trains to the C
backend's accuracy with the same losses (<= 1e-4 relative after 160 steps)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "moons.py"
ARGS = ["--plot", "", "--n", "512", "--batch", "32", "--epochs", "10"]
EMULATED = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
import cuda_emu
sys.argv = [sys.argv[2], *sys.argv[4:]]
with cuda_emu.installed(cuda_emu.FakeDriver(__import__("pathlib").Path(sys.argv_dir))):
    runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(backend: str, tmp_path: Path) -> str:
    if backend == "c":
        cmd = [sys.executable, str(EXAMPLE), *ARGS]
    else:
        script = EMULATED.replace("sys.argv_dir", repr(str(tmp_path)))
        cmd = [sys.executable, "-c", script, str(HERE), str(EXAMPLE), "--", *ARGS,
               "--backend", "cuda"]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def _value(name: str, text: str) -> float:
    m = re.search(rf"^{name}: (\S+)$", text, re.MULTILINE)
    assert m is not None, text
    return float(m.group(1))


@pytest.mark.gpu
def test_moons_example_on_cuda_matches_c(tmp_path: Path) -> None:
    c, cuda = _run("c", tmp_path), _run("cuda", tmp_path)
    losses_c = [float(x) for x in re.findall(r"loss (\S+)$", c, re.MULTILINE)]
    losses_g = [float(x) for x in re.findall(r"loss (\S+)$", cuda, re.MULTILINE)]
    assert len(losses_g) == len(losses_c) >= 2
    assert losses_g == pytest.approx(losses_c, rel=1e-4)
    assert _value("final loss", cuda) == pytest.approx(_value("final loss", c), rel=1e-4)
    assert _value("accuracy", cuda) == _value("accuracy", c) >= 0.97
