"""A data-parallel training script the distributed tests run under the launcher (and alone,
as the one-process reference): an MLP on a fixed random regression data set, each rank on
its shard of every batch. Writes the params of every rank to --out (rank r: <out>.r<r>.npz).
Fault switches make one rank misbehave (mismatched graph, killed, stalled)."""

# Written in the @op dialect: names declared inline ({w}) exist after rewriting.
# ruff: noqa: F821, F841

from __future__ import annotations

import argparse
import os
import signal
import time

import numpy as np

import ocannl_ast as oc
import ocannl_ast.distributed as ocd


@oc.op
def layer(dim):
    return lambda x: oc.tanh({w} @ x + {b, o := [dim]})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--opt", choices=["sgd", "adam"], default="sgd")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--start", type=int, default=0, help="first global step (after --load)")
    ap.add_argument("--batch", type=int, default=16, help="global batch")
    ap.add_argument("--hidden", type=int, default=8)
    ap.add_argument("--out", default=None)
    ap.add_argument("--save", default=None, help="checkpoint at --save-at (or at the end)")
    ap.add_argument("--save-at", type=int, default=-1, help="global step of the --save")
    ap.add_argument("--load", default=None, help="checkpoint to resume from")
    ap.add_argument("--mismatch", action="store_true", help="rank 1 builds a wider model")
    ap.add_argument("--kill-at", type=int, default=-1, help="rank 1 SIGKILLs itself")
    ap.add_argument("--stall-at", type=int, default=-1, help="rank 1 sleeps forever")
    ap.add_argument("--timeout", type=float, default=None)
    ap.add_argument("--dropout", type=float, default=0.0, help="dropout after the hidden layer")
    args = ap.parse_args()

    world = ocd.init(timeout=args.timeout)
    oc.set_seed(7)
    n_batches = 4
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(n_batches, args.batch, 3))
    ys = np.sin(xs.sum(axis=2, keepdims=True))
    local = args.batch // world.size
    x_all = oc.ndarray(ocd.shard(xs, axis=1), batch_axes=2, label="x_all")
    y_all = oc.ndarray(ocd.shard(ys, axis=1), batch_axes=2, label="y_all")
    batch = oc.static_index("batch")
    hidden = args.hidden + (4 if args.mismatch and world.rank == 1 else 0)
    l1, l2 = layer(hidden), layer(1)
    hidden_out = l1(x_all.batch_slice(batch))
    dropped = oc.nn.dropout(args.dropout, seed=5)(hidden_out) if args.dropout else hidden_out
    pred = l2(dropped)
    diff = pred - y_all.batch_slice(batch)
    loss = oc.einsum("b|o=>o", diff * diff) * (1.0 / local)
    update = (oc.sgd_update(loss, learning_rate=0.1, momentum=0.9) if args.opt == "sgd"
              else oc.adam_update(loss, learning_rate=0.01))
    ctx = oc.Context()
    step = ocd.data_parallel(ctx, loss, update, check_every=5, batch_size=local, seed=3)
    start = args.start
    if args.load:
        start = ocd.load(ctx, args.load).next_step(args.batch)
    initial = {f"init/{p.name}": ctx.get(p) for p in step.params}
    masks = {}
    probe = ctx.compile(dropped.forward_all(), keep=[dropped]) if args.dropout else None
    for s in range(start, start + args.steps):
        if probe is not None and s - start < 2:  # the dropout masks of the first 2 steps
            probe(batch=s % n_batches)
            masks[f"mask/{s}"] = ctx.get(dropped) != 0.0
        if args.save and s == args.save_at:
            ocd.save(ctx, args.save)
        if world.rank == 1 and s == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if world.rank == 1 and s == args.stall_at:
            time.sleep(3600)
        step(batch=s % n_batches)
    if args.save and args.save_at < 0:
        ocd.save(ctx, args.save)
    if args.out:
        np.savez(f"{args.out}.r{world.rank}.npz", **{p.name: ctx.get(p) for p in step.params},
                 **initial, **masks, global_step=step.global_step)
    print(f"done rank {world.rank} of {world.size} step {step.global_step}", flush=True)


if __name__ == "__main__":
    main()
