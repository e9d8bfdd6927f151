"""In-process checks of ocannl_ast.distributed: a world of one (no launcher, nothing of the
`dist` extra needed), sharding (equal parts; uneven ones raise), round-robin batches, the
launcher's timeout and clean-up, and that the core package never imports any of it."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import ROOT, launch, needs_mpi

import ocannl_ast as oc
import ocannl_ast.distributed as ocd
from ocannl_ast.distributed.comm import LocalComm
from ocannl_ast.distributed.world import World


class FakeComm(LocalComm):
    """Rank `rank` of `size` for the pure functions (no collective is called)."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size


def test_a_plain_run_is_a_world_of_one() -> None:
    world = ocd.init()
    assert (world.rank, world.size, world.backend) == (0, 1, "local")
    assert ocd.init("auto") is world
    with pytest.raises(oc.ArgumentError, match="backend must be one of"):
        ocd.init("nccl2")


def test_shard_gives_equal_contiguous_parts() -> None:
    data = np.arange(24).reshape(4, 6)
    parts = [ocd.shard(data, axis=1, world=World(FakeComm(r, 3), 5.0)) for r in range(3)]
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), data)
    assert all(p.shape == (4, 2) for p in parts)
    np.testing.assert_array_equal(ocd.shard(data), data)  # a world of one


def test_uneven_shards_raise() -> None:
    with pytest.raises(oc.ArgumentError, match=r"has 5 entries, not divisible by the 2 ranks"):
        ocd.shard(np.zeros((5, 3)), world=World(FakeComm(1, 2), 5.0))
    with pytest.raises(oc.ArgumentError, match="out of range"):
        ocd.shard(np.zeros(4), axis=1)


def test_round_robin_covers_consecutive_batches_per_global_step() -> None:
    taken = [list(ocd.round_robin(5, 4, world=World(FakeComm(r, 2), 5.0))) for r in range(2)]
    assert taken == [[0, 2, 4, 1], [1, 3, 0, 2]]
    assert list(ocd.round_robin(4, 2, start=3)) == [3, 0]


def _model(seed: int) -> tuple[Any, Any]:
    oc.set_seed(seed)
    rng = np.random.default_rng(1)
    x = oc.ndarray(rng.normal(size=(8, 3)), batch_axes=1, label="x")
    y = oc.ndarray(rng.normal(size=(8, 1)), batch_axes=1, label="y")
    pred = oc.nn.mlp([4, 1])(x)
    loss = oc.nn.mse(pred, y)
    return loss, oc.sgd_update(loss, learning_rate=0.05, momentum=0.9)


def test_a_world_of_one_equals_the_fused_step_bit_for_bit() -> None:
    loss, update = _model(3)
    ctx = oc.Context()
    step = ocd.data_parallel(ctx, loss, update)
    for _ in range(5):
        step()
    ref = oc.Context()  # the same graph in another context: params initialized alike
    fused = ref.compile([oc.grad_update(loss), update])
    for _ in range(5):
        fused()
    ps = sorted(loss.params(), key=lambda p: p.name)
    for p in ps:
        assert ctx.get(p).tobytes() == ref.get(p).tobytes(), p.name
    assert step.global_step == 5 and step.timings.steps == 5
    # every gradient lives in the one arena, in sorted-name order
    assert sum(ctx.get(p.grad).size for p in ps) == step.arena.size
    np.testing.assert_array_equal(ctx.get(ps[0].grad).ravel(), step.arena[:ps[0].dims()[0]
                                  * int(np.prod(ps[0].dims()[1:]))])


class DisagreeingPeer(LocalComm):
    """Rank 0 of 2 whose peer reports `change(obj)` from its all-gathers."""

    size = 2

    def __init__(self, key: str, value: str) -> None:
        self.key, self.value = key, value

    def allgather(self, obj: Any) -> list[Any]:
        other = dict(obj)
        if self.key in other:
            other[self.key] = self.value
        return [obj, other]


def test_disagreeing_code_or_params_name_what_differs_and_the_ranks() -> None:
    loss, update = _model(5)
    with pytest.raises(oc.DistributedError, match=r"compiled code differs across ranks "
                       r"\(update routine: rank\(s\) \[1\] differ from rank 0: rank 0: "
                       r"routine_\w+, rank 1: routine_0bad"):
        ocd.data_parallel(oc.Context(), loss, update,
                          world=World(DisagreeingPeer("update routine", "routine_0bad"), 5.0))
    name = sorted(p.name for p in loss.params())[1]
    world = World(DisagreeingPeer(name, "f00d"), 5.0)
    world.allgather = lambda obj, what: [obj, obj]  # type: ignore[method-assign]
    step = ocd.data_parallel(oc.Context(), loss, update, world=world)  # code agrees
    world.allgather = lambda obj, what: world.comm.allgather(obj)  # type: ignore[method-assign]
    with pytest.raises(oc.DistributedError, match=rf"params differ across ranks at global "
                       rf"step 0 \({name}: rank\(s\) \[1\] differ from rank 0"):
        step()


def test_data_parallel_rejects_bad_arguments() -> None:
    loss, update = _model(4)
    ctx = oc.Context()
    with pytest.raises(oc.ArgumentError, match="check_every must be a non-negative int"):
        ocd.data_parallel(ctx, loss, update, check_every=-1)
    with pytest.raises(oc.ArgumentError, match="ctx must be an oc.Context"):
        ocd.data_parallel("c", loss, update)  # type: ignore[arg-type]
    with pytest.raises(oc.ArgumentError, match="update code writes the gradients"):
        ocd.data_parallel(ctx, loss, [oc.grad_update(loss), update])
    step = ocd.data_parallel(ctx, loss, update)
    with pytest.raises(oc.ArgumentError, match="already has a data-parallel step"):
        ocd.data_parallel(ctx, loss, update)
    with pytest.raises(oc.ArgumentError, match="got unknown \\['batch'\\]"):
        step(batch=1)
    with pytest.raises(oc.DistributedError, match="no data-parallel step"):
        ocd.save(oc.Context(), "x.safetensors")


def test_the_core_package_imports_nothing_distributed() -> None:
    """No module outside ocannl_ast/distributed imports it, mpi4py or torch; importing
    ocannl_ast loads none of them."""
    pkg = ROOT / "ocannl_ast"
    bad = []
    for path in pkg.rglob("*.py"):
        if "distributed" in path.relative_to(pkg).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}: {n}" for n in names
                    if n.split(".")[0] in ("mpi4py", "torch") or "distributed" in n]
    assert bad == []
    code = ("import sys, ocannl_ast\n"
            "assert not {'mpi4py', 'torch', 'ocannl_ast.distributed'} & set(sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr


@needs_mpi
def test_the_launcher_prefixes_output_times_out_and_leaves_no_process(tmp_path: Path) -> None:
    script = tmp_path / "sleepy.py"
    script.write_text("import os, sys, time\n"
                      "r = os.environ['OMPI_COMM_WORLD_RANK']\n"
                      "open(f'pid{r}', 'w').write(str(os.getpid()))\n"
                      "print('hello from', r, flush=True)\n"
                      "time.sleep(600)\n")
    start = time.monotonic()
    proc = launch(tmp_path, script=script, launcher_args=("--timeout", "3"))
    assert time.monotonic() - start < 20
    assert proc.returncode == 124, proc.stderr
    assert "[rank 0] hello from 0" in proc.stdout and "[rank 1] hello from 1" in proc.stdout
    assert "--timeout of 3 s passed" in proc.stderr
    for r in (0, 1):
        pid = int((tmp_path / f"pid{r}").read_text())
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat"
                                                                 ).read_text().split()[2]


def test_save_and_load_in_a_world_of_one(tmp_path: Path) -> None:
    loss, update = _model(6)
    ctx = oc.Context()
    step = ocd.data_parallel(ctx, loss, update, batch_size=8, seed=11)
    for _ in range(3):
        step()
    path = tmp_path / "ck.safetensors"
    ocd.save(ctx, path)
    for _ in range(2):
        step()
    after = {p.name: ctx.get(p) for p in loss.params()}
    resume = ocd.load(ctx, path)
    assert (resume.world_size, resume.global_step, resume.samples, resume.seed) == (1, 3, 24, 11)
    assert resume.next_step(8) == 3 and resume.next_step(4) == 6
    with pytest.raises(oc.ArgumentError, match="not a multiple of the global batch 16"):
        resume.next_step(16)
    assert step.global_step == 3 and step.samples == 24
    for _ in range(2):
        step()
    assert all(ctx.get(p).tobytes() == after[p.name].tobytes() for p in loss.params())
    side = Path(str(path) + ".dist.json")
    side.write_text(side.read_text().replace('"global_step": 3', '"global_step": 4'))
    path.write_bytes(path.read_bytes()[:-1] + b" ")  # the checkpoint replaced afterwards
    with pytest.raises(oc.CheckpointError, match="its digest differs"):
        ocd.load(ctx, path)
    side.unlink()
    with pytest.raises(oc.CheckpointError, match=r"cannot read .*ck.safetensors.dist.json"):
        ocd.load(ctx, path)
    with pytest.raises(oc.CheckpointError, match="saving checkpoint"):
        ocd.save(ctx, tmp_path / "no" / "such" / "dir" / "ck.safetensors")


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@needs_mpi
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_launcher_leaves_no_rank_behind(tmp_path: Path) -> None:
    script = tmp_path / "sleepy.py"
    script.write_text("import os, time\n"
                      "r = os.environ['OMPI_COMM_WORLD_RANK']\n"
                      "open(f'pid{r}.tmp', 'w').write(str(os.getpid()))\n"
                      "os.replace(f'pid{r}.tmp', f'pid{r}')\n"
                      "time.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-m", "ocannl_ast.distributed.launch", "-n", "2",
                             "--timeout", "60", str(script)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 40
        while not all((tmp_path / f"pid{r}").exists() for r in (0, 1)):
            assert time.monotonic() < deadline and proc.poll() is None, "ranks did not start"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in (0, 1)]
    deadline = time.monotonic() + 15
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids)
