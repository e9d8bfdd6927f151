"""Dropout under data parallelism with 2 processes on this machine: the ranks draw
different masks, together the masks one process draws over the whole batch, so training
with dropout on halves matches one process on the full batch and the ranks' params stay
byte-identical. The launcher's hostfile path (what it hands mpirun for several hosts: no
transport restriction, the environment exported with -x) run with a hostfile that lists
this machine gives the same bits as the loopback path."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from conftest import alone, launch, needs_mpi, ok, params

pytestmark = needs_mpi

RATE = 0.3
ARGS = ("--dropout", str(RATE), "--hidden", "32", "--steps", "12")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One process on the full batch (`one`) and 2 ranks on halves (`two`), with dropout."""
    d = tmp_path_factory.mktemp("dropout")
    ok(alone(d, *ARGS, "--out", "one"))
    ok(launch(d, *ARGS, "--out", "two"))
    return d


def test_rank_masks_differ_and_together_are_the_full_batch_masks(runs: Path) -> None:
    one, r0, r1 = (params(runs / f) for f in ("one.r0.npz", "two.r0.npz", "two.r1.npz"))
    for s in (0, 1):
        m0, m1 = r0[f"mask/{s}"], r1[f"mask/{s}"]
        assert m0.shape == m1.shape == (8, 32)
        np.testing.assert_array_equal(np.concatenate([m0, m1]), one[f"mask/{s}"])
    assert not np.array_equal(r0["mask/0"], r0["mask/1"])  # a new mask each step


def test_the_union_of_rank_masks_keeps_the_right_fraction_independently(runs: Path) -> None:
    r0, r1 = (params(runs / f) for f in ("two.r0.npz", "two.r1.npz"))
    m0 = np.stack([r0["mask/0"], r0["mask/1"]])
    m1 = np.stack([r1["mask/0"], r1["mask/1"]])
    keep = 1.0 - RATE
    union = np.concatenate([m0, m1])
    sigma = math.sqrt(keep * (1 - keep) / union.size)
    assert abs(union.mean() - keep) < 5 * sigma, union.mean()
    # independent masks disagree on a cell with probability 2 keep (1 - keep); equal masks
    # (the old behaviour: every rank drew rank 0's) would disagree nowhere
    differ = float((m0 != m1).mean())
    p = 2 * keep * (1 - keep)
    assert abs(differ - p) < 5 * math.sqrt(p * (1 - p) / m0.size), differ


def test_params_stay_byte_identical_with_dropout_and_match_one_process(runs: Path) -> None:
    one, r0, r1 = (params(runs / f) for f in ("one.r0.npz", "two.r0.npz", "two.r1.npz"))
    names = [n for n in one if not n.startswith(("init/", "mask/")) and n != "global_step"]
    assert len(names) == 4 and int(r0["global_step"]) == 12
    for name in names:
        assert r0[name].tobytes() == r1[name].tobytes(), f"ranks differ on {name}"
        assert r0[f"init/{name}"].tobytes() == r1[f"init/{name}"].tobytes()
        rel = np.abs(r0[name] - one[name]).max() / np.abs(one[name]).max()
        assert rel < 1e-5, (name, rel)
        assert np.abs(one[name] - one[f"init/{name}"]).max() > 1e-3, f"{name} did not train"


def test_a_hostfile_listing_this_machine_runs_the_multi_host_path(runs: Path,
                                                                 tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost slots=2\n")
    proc = ok(launch(tmp_path, *ARGS, "--out", "hosts",
                     launcher_args=("--timeout", "70", "--hostfile", str(hosts))))
    assert "[rank 1] done rank 1 of 2 step 12" in proc.stdout
    loop, tcp = params(runs / "two.r1.npz"), params(tmp_path / "hosts.r1.npz")
    assert set(loop) == set(tcp)
    for k in loop:  # the sum of two ranks' gradients does not depend on the transport
        assert loop[k].tobytes() == tcp[k].tobytes(), k
