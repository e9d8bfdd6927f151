"""Data parallelism with 2 processes on this machine (loopback only) against one process on
the full batch: SGD with momentum and Adam agree within 1e-5 after 20 steps and the ranks
stay byte-identical; mismatched graphs, killed and stalled ranks end the job; a resumed run
equals the uninterrupted one bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import alone, launch, needs_mpi, ok, params

pytestmark = needs_mpi


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_two_ranks_on_halves_match_one_rank_on_the_full_batch(opt: str, tmp_path: Path
                                                               ) -> None:
    ok(alone(tmp_path, "--opt", opt, "--steps", "0", "--out", "init"))
    ok(alone(tmp_path, "--opt", opt, "--out", "one"))
    out = ok(launch(tmp_path, "--opt", opt, "--out", "two")).stdout
    assert "[rank 0] done rank 0 of 2 step 20" in out and "[rank 1] done rank 1 of 2" in out
    init, one = params(tmp_path / "init.r0.npz"), params(tmp_path / "one.r0.npz")
    r0, r1 = params(tmp_path / "two.r0.npz"), params(tmp_path / "two.r1.npz")
    assert set(r0) == set(one) and len(one) == 5  # 4 params and the step count
    for name in one:
        if name == "global_step":
            assert int(r0[name]) == int(one[name]) == 20
            continue
        assert r0[name].tobytes() == r1[name].tobytes(), f"ranks differ on {name}"
        assert _rel(r0[name], one[name]) < 1e-5, name
        assert _rel(one[name], init[name]) > 1e-3, f"{name} did not train"


def test_mismatched_graphs_raise_on_both_ranks(tmp_path: Path) -> None:
    proc = launch(tmp_path, "--mismatch")
    assert proc.returncode != 0
    for rank in (0, 1):
        assert any(line.startswith(f"[rank {rank}] ") and "DistributedError" in line
                   and "compiled code differs across ranks (grad routine: rank(s) [1]" in line
                   for line in proc.stderr.splitlines()), proc.stderr


def test_a_killed_rank_ends_the_job_non_zero(tmp_path: Path) -> None:
    proc = launch(tmp_path, "--kill-at", "3", launcher_args=("--timeout", "60"))
    assert proc.returncode not in (0, 124), proc.stderr  # mpirun noticed, not the timeout
    assert "done rank" not in proc.stdout


def test_a_stalled_rank_is_caught_by_the_watchdog(tmp_path: Path) -> None:
    proc = launch(tmp_path, "--stall-at", "3", "--timeout", "2",
                  launcher_args=("--timeout", "60"))
    assert proc.returncode not in (0, 124), proc.stderr
    assert "waited more than 2 s in the all-reduce of gradients" in proc.stderr


def test_save_then_resume_equals_the_uninterrupted_run(tmp_path: Path) -> None:
    ok(launch(tmp_path, "--opt", "adam", "--steps", "12", "--out", "full"))
    ok(launch(tmp_path, "--opt", "adam", "--steps", "6", "--save", "ck.safetensors"))
    assert (tmp_path / "ck.safetensors.dist.json").exists()
    ok(launch(tmp_path, "--opt", "adam", "--steps", "6", "--load", "ck.safetensors",
              "--out", "resumed"))
    # another world size resumes at the same sample (one rank on the full batch)
    ok(alone(tmp_path, "--opt", "adam", "--steps", "6", "--load", "ck.safetensors",
             "--out", "one"))
    full, resumed = params(tmp_path / "full.r0.npz"), params(tmp_path / "resumed.r0.npz")
    one = params(tmp_path / "one.r0.npz")
    assert int(resumed["global_step"]) == int(one["global_step"]) == 12
    for name in full:
        assert full[name].tobytes() == resumed[name].tobytes(), name
        assert _rel(one[name], full[name]) < 1e-5, name
