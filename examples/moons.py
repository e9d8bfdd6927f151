"""Train a 2-16-16-1 ReLU MLP on the half-moons data set with OCANNL-style compiled steps.

The whole training step (forward, backprop, SGD update with a decaying learning rate) is one
compiled C routine; it slices the resident data set at the batch number it is called with.
Prints the loss as it goes and a final line `accuracy: <fraction>`.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is a dependency; keep the example runnable
    def tqdm(it, **_):  # type: ignore[no-redef]
        return it

import ocannl_ast as oc


def half_moons(n: int, noise: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Two interleaved half circles with Gaussian noise; labels +1 / -1."""
    rng = np.random.default_rng(seed)
    half = n // 2
    t = rng.uniform(0.0, math.pi, size=n)
    upper = np.stack([np.cos(t[:half]), np.sin(t[:half])], axis=1)
    lower = np.stack([1.0 - np.cos(t[half:]), 0.5 - np.sin(t[half:])], axis=1)
    x = np.concatenate([upper, lower]) + rng.normal(0.0, noise, size=(n, 2))
    y = np.concatenate([np.ones(half), -np.ones(n - half)])
    perm = rng.permutation(n)
    return x[perm], y[perm]


@oc.op
def mlp_layer(hid_dim):
    """A hidden layer: the parameters are minted once per call, shared by every use."""
    return lambda x: oc.relu({w} @ x + {b, o := [hid_dim]})


@oc.op
def linear(out_dim):
    return lambda x: {w} @ x + {b, o := [out_dim]}


def make_model():
    l1, l2, l3 = mlp_layer(16), mlp_layer(16), linear(1)
    return lambda x: l3(l2(l1(x)))


@oc.cd
def decaying_lr(lr, base, step, total_steps):
    """lr = base * (1 - 0.9 * step / total_steps), computed inside the training routine."""
    lr[...] = base * (1.0 - 0.9 * step / total_steps)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=1024, help="data set size")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--plot", default="moons.png", help="decision boundary PNG (matplotlib)")
    ap.add_argument("--backend", default="c", choices=["c", "cuda"],
                    help="c (gcc) or cuda (NVRTC; needs `pip install '.[cuda]'` and a GPU)")
    ap.add_argument("--precision", default="float32",
                    choices=["float32", "float64", "float16", "bfloat16"],
                    help="storage precision (16-bit ones compute in float32; docs/precision.md)")
    ap.add_argument("--param-precision", default=None,
                    choices=["float32", "float64", "float16", "bfloat16"],
                    help="the params' own storage precision, e.g. float32 master weights in a "
                         "bfloat16 context (default: --precision's; docs/precision.md)")
    args = ap.parse_args()
    start = time.perf_counter()

    oc.set_seed(args.seed)
    xs, ys = half_moons(args.n, 0.1, args.seed)
    n_batches = args.n // args.batch
    x_all = oc.ndarray(xs.reshape(n_batches, args.batch, 2), batch_axes=2, label="moons_x")
    y_all = oc.ndarray(ys.reshape(n_batches, args.batch, 1), batch_axes=2, label="moons_y")
    batch, step = oc.static_index("batch"), oc.static_index("step")

    model = make_model()
    x, y = x_all.batch_slice(batch), y_all.batch_slice(batch)
    margin = oc.relu(1.0 - y * model(x))
    loss = oc.einsum("b|o=>o", margin) * (1.0 / args.batch)
    for p in loss.params() if args.param_precision else ():
        oc.set_precision(p, args.param_precision)

    total_steps = args.epochs * n_batches
    lr = oc.node("learning_rate", output_dims=[1])
    lr_code = decaying_lr(lr, args.lr, step, float(total_steps))
    ctx = oc.Context(backend=args.backend, precision=args.precision)
    train_step = ctx.compile([oc.grad_update(loss), lr_code,
                              oc.sgd_update(loss, learning_rate=lr, momentum=0.9)])

    global_step = 0
    for epoch in tqdm(range(args.epochs), desc="epochs", leave=False):
        epoch_loss = 0.0
        for b in range(n_batches):
            train_step(batch=b, step=global_step)
            epoch_loss += float(ctx.get(loss)[0])
            global_step += 1
        if epoch % 10 == 0 or epoch == args.epochs - 1:
            print(f"epoch {epoch:3d}  loss {epoch_loss / n_batches:.6f}", flush=True)

    scores = model(x_all)
    predict = ctx.compile(scores.forward)
    predict()
    pred = np.sign(ctx.get(scores).reshape(-1))
    accuracy = float(np.mean(pred == ys.reshape(n_batches, args.batch).reshape(-1)))
    print(f"final loss: {epoch_loss / n_batches!r}")
    print(f"time: {time.perf_counter() - start:.2f}s")
    if args.plot:
        plot_boundary(ctx, model, xs, ys, args.plot)
    print(f"accuracy: {accuracy}")


def plot_boundary(ctx: oc.Context, model, xs: np.ndarray, ys: np.ndarray, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    gx, gy = np.meshgrid(np.linspace(-1.5, 2.5, 80), np.linspace(-1.0, 1.5, 60))
    grid = np.stack([gx.ravel(), gy.ravel()], axis=1)
    scores = model(oc.ndarray(grid, batch_axes=1, label="grid"))
    r = ctx.compile(scores.forward)
    r()
    z = ctx.get(scores).reshape(gx.shape)
    plt.contourf(gx, gy, z > 0, alpha=0.3)
    plt.scatter(xs[:, 0], xs[:, 1], c=ys, s=8, cmap="coolwarm")
    plt.savefig(path, dpi=80)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
