"""Data-parallel throughput: one training step of an MLP on a global batch, at 1 and at 2
processes (`ocannl_ast.distributed` under its launcher, MPI, this machine only), step time
split into compute, waiting for the slowest rank and the gradient all-reduce, beside the
model T(N) = Tc/N + 2(N-1)/N * S/beta + 2(N-1) * alpha, with the all-reduce latency alpha and
bandwidth beta measured here.

    python benchmarks/bench_data_parallel.py [--quick] [--batch 8192] [--hidden 256]

Each configuration runs as its own job (`--worker` is the per-rank entry); rank 0 reports
JSON on its last line. Throughput is global samples per second.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def worker(args: argparse.Namespace) -> None:
    """One rank: build the model on its share of the batch, time steps, report (rank 0)."""
    import ocannl_ast as oc
    import ocannl_ast.distributed as ocd

    world = ocd.init()
    oc.set_seed(0)
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(args.batch, 32)).astype(np.float32)
    ys = np.tanh(xs[:, :1] * xs[:, 1:2])
    x = oc.ndarray(ocd.shard(xs), batch_axes=1, label="x")
    y = oc.ndarray(ocd.shard(ys), batch_axes=1, label="y")
    loss = oc.nn.mse(oc.nn.mlp([args.hidden, args.hidden, 1])(x), y)
    ctx = oc.Context()
    step = ocd.data_parallel(ctx, loss, oc.sgd_update(loss, learning_rate=0.01, momentum=0.9),
                             check_every=0, profile=True)
    for _ in range(args.warmup):
        step()
    step.timings.per_step.clear()
    world.barrier()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    world.barrier()
    total = (time.perf_counter() - t0) / args.steps
    parts = np.median(np.array(step.timings.per_step), axis=0)
    alpha, beta = allreduce_cost(world) if world.size > 1 else (0.0, float("inf"))
    if world.rank == 0:
        print(json.dumps({"n": world.size, "step": total, "compute": float(parts[0]),
                          "wait": float(parts[1]), "allreduce": float(parts[2]),
                          "bytes": int(step.arena.nbytes), "alpha": alpha, "beta": beta,
                          "throughput": args.batch / total}), flush=True)


def allreduce_cost(world: object) -> tuple[float, float]:
    """Latency (s, an 8-byte all-reduce) and bandwidth (bytes/s, from a 4 MB one)."""
    def timed(buf: np.ndarray, reps: int) -> float:
        w = world  # a World
        w.barrier()  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        for _ in range(reps):
            w.comm.allreduce_(buf)  # type: ignore[attr-defined]
        return (time.perf_counter() - t0) / reps

    small = timed(np.zeros(2, np.float32), 200)
    big = np.zeros(1 << 20, np.float32)
    t_big = timed(big, 20)
    n = world.size  # type: ignore[attr-defined]
    alpha = small / (2 * (n - 1))
    beta = 2 * (n - 1) / n * big.nbytes / max(t_big - 2 * (n - 1) * alpha, 1e-9)
    return alpha, beta


def run_job(n: int, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, "-m", "ocannl_ast.distributed.launch", "-n", str(n),
           "--timeout", "500", __file__, "--worker", "--batch", str(args.batch),
           "--hidden", str(args.hidden), "--steps", str(args.steps),
           "--warmup", str(args.warmup)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600,
                          check=False)
    lines = [ln.split("] ", 1)[1] for ln in proc.stdout.splitlines()
             if ln.startswith("[rank 0] {")]
    if proc.returncode or not lines:
        raise SystemExit(f"job of {n} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return dict(json.loads(lines[-1]))


def model(n: int, tc: float, s: float, alpha: float, beta: float) -> float:
    """T(N) = Tc/N + 2(N-1)/N * S/beta + 2(N-1) * alpha (ring all-reduce)."""
    return tc / n + 2 * (n - 1) / n * s / beta + 2 * (n - 1) * alpha


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="small model, few steps")
    ap.add_argument("--batch", type=int, default=8192)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.quick:
        args.batch, args.hidden, args.steps, args.warmup = 512, 32, 5, 1
    one, two = run_job(1, args), run_job(2, args)
    tc = one["compute"]
    print(f"MLP 32-{args.hidden}-{args.hidden}-1, global batch {args.batch}, "
          f"gradients {two['bytes'] / 1e6:.2f} MB; all-reduce alpha {two['alpha'] * 1e6:.1f} us,"
          f" beta {two['beta'] / 1e9:.2f} GB/s")
    print(f"{'N':>2} {'step':>10} {'compute':>10} {'wait':>10} {'all-reduce':>10} "
          f"{'samples/s':>11} {'model T(N)':>11}")
    for r in (one, two):
        n = int(r["n"])
        pred = model(n, tc, two["bytes"], two["alpha"], two["beta"])
        print(f"{n:>2} {r['step'] * 1e3:>8.2f}ms {r['compute'] * 1e3:>8.2f}ms "
              f"{r['wait'] * 1e3:>8.2f}ms {r['allreduce'] * 1e3:>8.2f}ms "
              f"{r['throughput']:>11.0f} {pred * 1e3:>9.2f}ms")
    for n in (4, 8):
        print(f"{n:>2} {'':>10} {'':>10} {'':>10} {'':>10} {'':>11} "
              f"{model(n, tc, two['bytes'], two['alpha'], two['beta']) * 1e3:>9.2f}ms")
    print(f"cores: {len(os.sched_getaffinity(0))}, load average: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (a busy machine starves the ranks)")
    print(f"speed-up at 2 processes: {two['throughput'] / one['throughput']:.2f}x "
          "(target >= 1.6x on a step >= 20 ms)")


if __name__ == "__main__":
    main()
