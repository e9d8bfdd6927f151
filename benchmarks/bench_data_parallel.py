"""Data-parallel throughput: one training step on a global batch, at 1 and at 2 processes
(`ocannl_ast.distributed` under its launcher, MPI, this machine only), for an MLP and for the
transformer of the performance issue (transformer_model.py); step time split into compute,
waiting for the slowest rank and the gradient all-reduce, beside the model
T(N) = Tc/N + 2(N-1)/N * S/beta + 2(N-1) * alpha, with the all-reduce latency alpha and
bandwidth beta measured here.

Overlap of the reduction with backprop (the issue: "measure before building it"): the
forward alone and the grad routine (forward + backprop) are timed on every rank at once, so
backprop = grad - forward; overlapping the all-reduce with backprop can save at most
min(all-reduce, backprop) per step. That bound is printed as a fraction of the step at 2
processes and, from the model, at N = 8 and 64 (strong scaling: the global batch fixed, so
each rank's backprop shrinks as 1/N while the all-reduce grows), both with this machine's
alpha, beta and with a 10 Gb/s network's (alpha 20 us, beta 1.1 GB/s: an assumption, not a
measurement).

    python benchmarks/bench_data_parallel.py [--quick] [--model mlp|transformer|both]
        [--batch 8192] [--hidden 256]

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
#: an assumed 10 Gb/s Ethernet between hosts: latency (s) and bandwidth (bytes/s)
NETWORK = (20e-6, 1.1e9)


def build_mlp(args: argparse.Namespace, world: Any) -> tuple[Any, Any, Callable[[int], dict]]:
    """An MLP 32-hidden-hidden-1 on this rank's share of a fixed regression batch."""
    import ocannl_ast as oc
    import ocannl_ast.distributed as ocd

    rng = np.random.default_rng(0)
    xs = rng.normal(size=(args.batch, 32)).astype(np.float32)
    ys = np.tanh(xs[:, :1] * xs[:, 1:2])
    x = oc.ndarray(ocd.shard(xs), batch_axes=1, label="x")
    y = oc.ndarray(ocd.shard(ys), batch_axes=1, label="y")
    loss = oc.nn.mse(oc.nn.mlp([args.hidden, args.hidden, 1])(x), y)
    return loss, oc.sgd_update(loss, learning_rate=0.01, momentum=0.9), lambda i: {}


def build_transformer(args: argparse.Namespace, world: Any
                      ) -> tuple[Any, Any, Callable[[int], dict]]:
    """The issue's character-level transformer LM (AdamW) on this rank's share of each
    batch of its resident data set."""
    import transformer_model as tm

    import ocannl_ast as oc
    import ocannl_ast.distributed as ocd

    cfg = tm.QUICK if args.quick else tm.Config()
    ids_np, tgt_np = tm.data(cfg)
    onehot = np.eye(cfg.vocab, dtype=np.float32)[tgt_np]
    ids_all = oc.ndarray(ocd.shard(ids_np, axis=1), batch_axes=2)
    tgt_all = oc.ndarray(ocd.shard(onehot, axis=1), batch_axes=2)
    bi = oc.static_index("batch")
    loss, _ = tm.ocannl_loss(cfg, ids_all.batch_slice(bi), tgt_all.batch_slice(bi))
    update = oc.adam_update(loss, learning_rate=cfg.lr, weight_decay=cfg.weight_decay)
    return loss, update, lambda i: {"batch": i % cfg.n_batches}


def worker(args: argparse.Namespace) -> None:
    """One rank: build the model on its share of the batch, time steps, report (rank 0)."""
    import ocannl_ast as oc
    import ocannl_ast.distributed as ocd

    world = ocd.init()
    oc.set_seed(0)
    build = build_transformer if args.model == "transformer" else build_mlp
    loss, update, statics = build(args, world)
    ctx = oc.Context()
    step = ocd.data_parallel(ctx, loss, update, check_every=0, profile=True)
    forward = ctx.compile(loss.forward_all())
    for i in range(args.warmup):
        step(**statics(i))
    step.timings.per_step.clear()
    world.barrier()
    t0 = time.perf_counter()
    for i in range(args.steps):
        step(**statics(i))
    world.barrier()
    total = (time.perf_counter() - t0) / args.steps
    per_step = np.array(step.timings.per_step)
    parts = np.median(per_step, axis=0)

    def each(run: Callable[..., Any]) -> float:
        """Median seconds of `run` over the steps, every rank running it at once."""
        world.barrier()
        times = []
        for i in range(args.steps):
            t = time.perf_counter()
            run(**statics(i))
            times.append(time.perf_counter() - t)
        return float(np.median(times))

    t_forward, t_grad = each(forward), each(step.grad_routine)
    cost = (allreduce_cost(world, step.arena) if world.size > 1 else
            {"alpha": 0.0, "beta": float("inf"), "arena_median": 0.0, "arena_min": 0.0})
    if world.rank == 0:
        print(json.dumps({"n": world.size, "step": total, "compute": float(parts[0]),
                          "wait": float(parts[1]), "allreduce": float(parts[2]),
                          "allreduce_min": float(per_step[:, 2].min()), "forward": t_forward, "grad": t_grad,
                          "bytes": int(step.arena.nbytes), **cost,
                          "throughput": global_batch(args) / total}), flush=True)


def global_batch(args: argparse.Namespace) -> int:
    if args.model == "transformer":
        import transformer_model as tm

        return (tm.QUICK if args.quick else tm.Config()).batch
    return int(args.batch)


def allreduce_cost(world: Any, arena: np.ndarray) -> dict[str, float]:
    """The all-reduce alone, each call timed after a barrier (so a late peer is not
    counted): latency alpha (s, from 8-byte calls) and bandwidth beta (bytes/s, from 4 MB
    calls), both from the fastest call — on a shared machine a rank descheduled mid-call
    only ever adds time, so the fastest call is the hardware's cost; and the gradient
    arena's own all-reduce, median and fastest."""
    def times(buf: np.ndarray, reps: int) -> np.ndarray:
        out = []
        for _ in range(reps):
            world.barrier()
            t0 = time.perf_counter()
            world.comm.allreduce_(buf)
            out.append(time.perf_counter() - t0)
        return np.array(out)

    n = world.size
    small = float(times(np.zeros(2, np.float32), 200).min())
    big = np.zeros(1 << 20, np.float32)
    t_big = float(times(big, 30).min())
    alpha = small / (2 * (n - 1))
    beta = 2 * (n - 1) / n * big.nbytes / max(t_big - 2 * (n - 1) * alpha, 1e-9)
    t_arena = times(arena.copy(), 100)
    return {"alpha": alpha, "beta": beta, "arena_median": float(np.median(t_arena)),
            "arena_min": float(t_arena.min())}


def run_job(n: int, args: argparse.Namespace) -> dict[str, float]:
    cmd = [sys.executable, "-m", "ocannl_ast.distributed.launch", "-n", str(n),
           "--timeout", "500", __file__, "--worker", "--model", args.model,
           "--batch", str(args.batch), "--hidden", str(args.hidden),
           "--steps", str(args.steps), "--warmup", str(args.warmup),
           *(["--quick"] if args.quick else [])]
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


def allreduce_time(n: int, s: float, alpha: float, beta: float) -> float:
    """A ring all-reduce of S bytes over N ranks: 2(N-1)/N * S/beta + 2(N-1) * alpha."""
    return 2 * (n - 1) / n * s / beta + 2 * (n - 1) * alpha


def model(n: int, tc: float, s: float, alpha: float, beta: float) -> float:
    """T(N) = Tc/N + 2(N-1)/N * S/beta + 2(N-1) * alpha (ring all-reduce)."""
    return tc / n + allreduce_time(n, s, alpha, beta)


def overlap_bound(n: int, tc: float, backprop: float, s: float, alpha: float, beta: float
                  ) -> tuple[float, float, float]:
    """At N ranks (global batch fixed): the all-reduce, each rank's backprop (backprop/N)
    and the most overlapping them can save, min of the two, as a fraction of T(N)."""
    ar, bp = allreduce_time(n, s, alpha, beta), backprop / n
    return ar, bp, min(ar, bp) / model(n, tc, s, alpha, beta)


def report(label: str, one: dict[str, float], two: dict[str, float]) -> None:
    tc, s = one["compute"], two["bytes"]
    print(f"{label}, gradients {s / 1e6:.2f} MB; all-reduce alpha {two['alpha'] * 1e6:.1f} us, "
          f"beta {two['beta'] / 1e9:.2f} GB/s")
    print(f"{'N':>2} {'step':>10} {'compute':>10} {'wait':>10} {'all-reduce':>10} "
          f"{'samples/s':>11} {'model T(N)':>11}")
    for r in (one, two):
        n = int(r["n"])
        pred = model(n, tc, s, two["alpha"], two["beta"])
        print(f"{n:>2} {r['step'] * 1e3:>8.2f}ms {r['compute'] * 1e3:>8.2f}ms "
              f"{r['wait'] * 1e3:>8.2f}ms {r['allreduce'] * 1e3:>8.2f}ms "
              f"{r['throughput']:>11.0f} {pred * 1e3:>9.2f}ms")
    for n in (4, 8):
        print(f"{n:>2} {'':>10} {'':>10} {'':>10} {'':>10} {'':>11} "
              f"{model(n, tc, s, two['alpha'], two['beta']) * 1e3:>9.2f}ms")
    print(f"speed-up at 2 processes: {two['throughput'] / one['throughput']:.2f}x "
          "(target >= 1.6x on a step >= 20 ms)")
    # overlap: measured at 2 processes, then the model's N = 8, 64
    backprop1 = max(one["grad"] - one["forward"], 0.0)
    backprop2 = max(two["grad"] - two["forward"], 0.0)
    ar = two["arena_min"]
    save = min(ar, backprop2)
    print(f"overlap at 2 processes: the gradients' all-reduce alone {ar * 1e3:.3f} ms fastest "
          f"({two['arena_median'] * 1e3:.3f} median; inside the steps {two['allreduce'] * 1e3:.3f}"
          f" median, {two['allreduce_min'] * 1e3:.3f} fastest: scheduling delays included) = "
          f"{ar / two['step']:.1%} of the "
          f"{two['step'] * 1e3:.2f} ms step; backprop {backprop2 * 1e3:.2f} ms (grad routine "
          f"{two['grad'] * 1e3:.2f} - forward {two['forward'] * 1e3:.2f}); an ideal overlap "
          f"saves <= {save * 1e3:.3f} ms = {save / two['step']:.1%} of the step "
          f"(in-step figure: <= {min(two['allreduce'], backprop2) / two['step']:.1%})")
    print(f"  1 process: grad routine {one['grad'] * 1e3:.2f} ms - forward "
          f"{one['forward'] * 1e3:.2f} ms = backprop {backprop1 * 1e3:.2f} ms of the "
          f"{tc * 1e3:.2f} ms compute; the model below (global batch fixed, backprop/N per "
          "rank; N beyond the global batch is hypothetical):")
    for where, (alpha, beta) in (("this machine", (two["alpha"], two["beta"])),
                                 ("10 Gb/s network (assumed)", NETWORK)):
        cells = []
        for n in (2, 8, 64):
            ar, bp, frac = overlap_bound(n, tc, backprop1, s, alpha, beta)
            cells.append(f"N={n}: all-reduce {ar * 1e3:.3f} ms, backprop/N {bp * 1e3:.3f} ms, "
                         f"saves <= {frac:.1%}")
        print(f"  model, {where}: " + "; ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="small models, few steps")
    ap.add_argument("--model", choices=["mlp", "transformer", "both"], default="both")
    ap.add_argument("--batch", type=int, default=8192, help="the MLP's global batch")
    ap.add_argument("--hidden", type=int, default=256, help="the MLP's hidden width")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=3)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.quick:
        args.batch, args.hidden, args.steps, args.warmup = 512, 32, 5, 1
    models = ["mlp", "transformer"] if args.model == "both" else [args.model]
    for m in models:
        args.model = m
        one, two = run_job(1, args), run_job(2, args)
        label = (f"MLP 32-{args.hidden}-{args.hidden}-1, global batch {args.batch}"
                 if m == "mlp" else f"transformer LM (transformer_model.py"
                 f"{', quick' if args.quick else ''}), global batch {global_batch(args)}")
        report(label, one, two)
        print()
    print(f"cores: {len(os.sched_getaffinity(0))}, load average: "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} (a busy machine starves the ranks)")


if __name__ == "__main__":
    main()
