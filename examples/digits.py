"""Train a small conv net on scikit-learn's bundled 8x8 handwritten digits.

conv2d 3x3 "same" -> relu -> max_pool 2x2 -> flatten -> linear(10), cross-entropy, Adam. The data set
ships inside scikit-learn (no download): `pip install '.[examples]'`. The training data stays
resident in the context; one compiled routine (forward, backprop, Adam) slices the batch it
is called with. Prints the loss per epoch and a final line `accuracy: <fraction>` on a
held-out split; saves a loss-curve PNG when matplotlib is installed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

try:
    from tqdm import tqdm
except ImportError:  # pragma: no cover - tqdm is a dependency; keep the example runnable
    def tqdm(it, **_):  # type: ignore[no-redef]
        return it

# Lines printed while the bar is drawn go through tqdm.write so that they do not break it.
log = getattr(tqdm, "write", print)

import ocannl_ast as oc

N_CLASSES = 10


def load_digits_split(held_out: float, seed: int) -> tuple[np.ndarray, ...]:
    """Images scaled to [0, 1] as (n, 8, 8, 1), labels as ints; a shuffled train / held-out
    split with a fixed seed."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        sys.exit("examples/digits.py needs scikit-learn (its bundled digits data set): "
                 "pip install 'ocannl_ast[examples]'  (or: pip install scikit-learn)")
    data = load_digits()
    images = (data.images / 16.0).reshape(-1, 8, 8, 1)
    labels = data.target.astype(np.int64)
    perm = np.random.default_rng(seed).permutation(len(labels))
    n_test = round(held_out * len(labels))
    test, train = perm[:n_test], perm[n_test:]
    return images[train], labels[train], images[test], labels[test]


def make_model(channels: int):
    conv = oc.nn.conv2d(channels, 3, padding="same")
    pool = oc.nn.max_pool2d(2)
    head = oc.nn.linear(N_CLASSES)
    # linear acts on the last axis only (as torch.nn.Linear): flatten the feature maps first
    return lambda x: head(oc.nn.flatten(pool(oc.relu(conv(x)))))


def batched(xs: np.ndarray, ys: np.ndarray, batch: int, rng: np.random.Generator):
    """A shuffled epoch as (n_batches, batch, ...) arrays; the remainder is dropped."""
    n_batches = len(ys) // batch
    perm = rng.permutation(len(ys))[:n_batches * batch]
    onehot = np.eye(N_CLASSES)[ys[perm]]
    return (xs[perm].reshape(n_batches, batch, *xs.shape[1:]),
            onehot.reshape(n_batches, batch, N_CLASSES))


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--epochs", type=int, default=12)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--channels", type=int, default=16, help="conv output channels")
    ap.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    ap.add_argument("--held-out", type=float, default=0.2, help="held-out fraction")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--plot", default=str(Path(__file__).with_name("digits_loss.png")),
                    help="loss-curve PNG (needs matplotlib; '' for none)")
    ap.add_argument("--backend", default="c", choices=["c", "cuda"],
                    help="c (gcc) or cuda (NVRTC; needs `pip install '.[cuda]'` and a GPU)")
    ap.add_argument("--precision", default="float32",
                    choices=["float32", "float64", "float16", "bfloat16"],
                    help="storage precision (16-bit ones compute in float32; docs/precision.md)")
    ap.add_argument("--param-precision", default=None,
                    choices=["float32", "float64", "float16", "bfloat16"],
                    help="the params' own storage precision, e.g. float32 master weights in a "
                         "bfloat16 context (default: --precision's; docs/precision.md)")
    return ap.parse_args()


def main() -> None:
    args = parse_args()
    start = time.perf_counter()
    oc.set_seed(args.seed)
    x_train, y_train, x_test, y_test = load_digits_split(args.held_out, args.seed)
    rng = np.random.default_rng(args.seed)
    xs, ts = batched(x_train, y_train, args.batch, rng)
    n_batches = xs.shape[0]
    x_all = oc.ndarray(xs, batch_axes=2, label="digits_x")
    t_all = oc.ndarray(ts, batch_axes=2, label="digits_t")
    batch = oc.static_index("batch")

    model = make_model(args.channels)
    loss = oc.nn.cross_entropy(model(x_all.batch_slice(batch)), t_all.batch_slice(batch))
    for p in loss.params() if args.param_precision else ():
        oc.set_precision(p, args.param_precision)
    # float16 cannot hold Adam's second moments of small gradients (docs/precision.md)
    eps = 1e-4 if args.precision == "float16" else 1e-8
    ctx = oc.Context(backend=args.backend, precision=args.precision)
    train_step = ctx.compile([oc.grad_update(loss),
                              oc.adam_update(loss, learning_rate=args.lr, eps=eps)])

    curve = []
    for epoch in (bar := tqdm(range(args.epochs), desc="epochs", leave=False)):
        if epoch > 0:  # reshuffle: new batches into the resident data set
            xs, ts = batched(x_train, y_train, args.batch, rng)
            ctx.set(x_all, xs)
            ctx.set(t_all, ts)
        epoch_loss = 0.0
        for b in range(n_batches):
            train_step(batch=b)
            epoch_loss += float(ctx.get(loss).reshape(-1)[0])
        curve.append(epoch_loss / n_batches)
        if hasattr(bar, "set_postfix"):
            bar.set_postfix(loss=f"{curve[-1]:.4f}")
        log(f"epoch {epoch:3d}  loss {curve[-1]:.6f}")

    accuracy = evaluate(ctx, model, x_test, y_test)
    print(f"final loss: {curve[-1]!r}")
    print(f"time: {time.perf_counter() - start:.2f}s")
    if args.plot:
        plot_curve(curve, args.plot)
    print(f"accuracy: {accuracy}")


def evaluate(ctx: oc.Context, model, xs: np.ndarray, ys: np.ndarray) -> float:
    """Held-out accuracy: one forward routine over the whole held-out set."""
    logits = model(oc.ndarray(xs, batch_axes=1, label="digits_test_x"))
    ctx.compile(logits.forward)()
    pred = np.argmax(ctx.get(logits).reshape(len(ys), N_CLASSES), axis=1)
    return float(np.mean(pred == ys))


def plot_curve(curve: list[float], path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.plot(range(1, len(curve) + 1), curve, marker="o")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean training loss (cross-entropy)")
    ax.set_title("digits: conv net, Adam")
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    print(f"saved {path}")


if __name__ == "__main__":
    main()
