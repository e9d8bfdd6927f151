"""The half-moons MLP of `moons.py`, trained data-parallel: each rank holds its shard of every
batch, gradients are averaged across ranks after backprop, and the same SGD update runs on
every rank. Run it with N processes on this machine:

    python -m ocannl_ast.distributed.launch -n 2 examples/moons_dp.py

(alone, `python examples/moons_dp.py` is a world of one). Rank 0 prints the loss and a final
line `accuracy: <fraction>`; `--checkpoint PATH` saves at the end and resumes from PATH when
it exists (with any number of ranks).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from moons import half_moons, make_model

import ocannl_ast as oc
import ocannl_ast.distributed as ocd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1024, help="data set size")
    ap.add_argument("--batch", type=int, default=32, help="global batch (all ranks)")
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--checkpoint", default=None)
    args = ap.parse_args()
    start = time.perf_counter()
    world = ocd.init()

    oc.set_seed(args.seed)
    xs, ys = half_moons(args.n, 0.1, args.seed)
    n_batches = args.n // args.batch
    local = args.batch // world.size
    # every batch split across the ranks: rank r holds rows r*local .. (r+1)*local-1 of each
    x_mine = ocd.shard(xs.reshape(n_batches, args.batch, 2), axis=1)
    y_mine = ocd.shard(ys.reshape(n_batches, args.batch, 1), axis=1)
    x_all = oc.ndarray(x_mine, batch_axes=2, label="moons_x")
    y_all = oc.ndarray(y_mine, batch_axes=2, label="moons_y")
    batch = oc.static_index("batch")

    model = make_model()
    margin = oc.relu(1.0 - y_all.batch_slice(batch) * model(x_all.batch_slice(batch)))
    loss = oc.einsum("b|o=>o", margin) * (1.0 / local)  # this rank's mean: ranks average
    ctx = oc.Context()
    step = ocd.data_parallel(ctx, loss, oc.sgd_update(loss, learning_rate=args.lr,
                                                      momentum=0.9),
                             batch_size=local, seed=args.seed)
    first = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        first = ocd.load(ctx, args.checkpoint).next_step(args.batch)
    total = args.epochs * n_batches
    epoch_loss = 0.0
    for s in range(first, total):
        step(batch=s % n_batches)
        epoch_loss += float(ctx.get(loss)[0])
        if (s + 1) % (10 * n_batches) == 0 and world.rank == 0:
            print(f"step {s + 1:5d}  loss {epoch_loss / (10 * n_batches):.6f}", flush=True)
            epoch_loss = 0.0
    if args.checkpoint:
        ocd.save(ctx, args.checkpoint)

    scores = model(oc.ndarray(xs, batch_axes=1, label="all_x"))
    predict = ctx.compile(scores.forward)
    predict()
    accuracy = float(np.mean(np.sign(ctx.get(scores).reshape(-1)) == ys))
    if world.rank == 0:
        print(f"ranks: {world.size}  time: {time.perf_counter() - start:.2f}s")
        print(f"accuracy: {accuracy}")


if __name__ == "__main__":
    main()
