"""A small conv net training step: 8x8x1 images, batch 64, conv 3x3 "same" with 16 channels,
relu, max-pool 2, dense 10, cross-entropy, Adam -- written with `oc.nn` as a user would,
against the same model in PyTorch eager (1 thread) from the same weights. The first losses
must agree (<= 1e-4 relative) before any time counts.

Run: `.venv/bin/python benchmarks/bench_convnet.py [--quick]` (or benchmarks/run_all.py).
"""

# Written in the @op dialect: names declared inline ({w}) exist after rewriting.
# ruff: noqa: F821, F841
# mypy: ignore-errors

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_matmul
from common import Row, measure_all, print_table, ratio_row

import ocannl_ast as oc

FULL = (64, 8, 16, 10, 8)  # batch, image side, channels, classes, batches in the data set
QUICK = (4, 4, 2, 3, 2)
LR = 1e-3
TARGET = 0.5
LOSS_RTOL = 1e-4


@oc.op
def dense(out_dim):
    """Flatten height, width, channels into `out_dim` outputs."""
    return lambda x: oc.einsum("..b..|h,w,c; h,w,c->o => ..b..|o", x, {w}) + {b, o := [out_dim]}


def data(size: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    batch, side, _, classes, nb = size
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(nb, batch, side, side, 1)).astype(np.float32)
    ys = rng.integers(0, classes, size=(nb, batch))
    return xs, ys


def weights(size: tuple[int, ...]) -> dict[str, np.ndarray]:
    """ocannl layouts: kernel (ch, 3, 3, 1), dense w (classes, h, w, ch)."""
    _, side, ch, classes, _ = size
    rng = np.random.default_rng(1)
    half = side // 2
    return {"kernel": rng.uniform(-1, 1, (ch, 3, 3, 1)) / 3.0,
            "bias": rng.uniform(-0.1, 0.1, (ch,)),
            "w": rng.uniform(-1, 1, (classes, half, half, ch)) / np.sqrt(half * half * ch),
            "b": rng.uniform(-0.1, 0.1, (classes,))}


def ocannl_step(size: tuple[int, ...], xs: np.ndarray, ys: np.ndarray,
                ws: dict[str, np.ndarray]) -> tuple[Callable[[int], float], oc.Context]:
    _, _, ch, classes, nb = size
    x_all = oc.ndarray(xs, batch_axes=2)
    y_all = oc.ndarray(np.eye(classes, dtype=np.float32)[ys], batch_axes=2)
    bi = oc.static_index("batch")
    h = oc.nn.conv2d(ch, 3, padding="same")(x_all.batch_slice(bi))
    logits = dense(classes)(oc.nn.max_pool2d(2)(oc.relu(h)))
    loss = oc.nn.cross_entropy(logits, y_all.batch_slice(bi))
    ctx = oc.Context()
    routine = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=LR)])
    for p in loss.params():
        ctx.set(p, ws[p.label].astype(np.float32))

    def step(i: int) -> float:
        routine(batch=i % nb)
        return float(ctx.get(loss)[0]) if i < 0 else 0.0

    step.loss = lambda: float(ctx.get(loss)[0])  # type: ignore[attr-defined]
    return step, ctx


def torch_step(size: tuple[int, ...], xs: np.ndarray, ys: np.ndarray,
               ws: dict[str, np.ndarray]) -> Callable[[int], float]:
    import torch
    import torch.nn.functional as F

    nb = size[4]
    kernel = torch.nn.Parameter(torch.from_numpy(ws["kernel"].transpose(0, 3, 1, 2).astype(np.float32)))
    bias = torch.nn.Parameter(torch.from_numpy(ws["bias"].astype(np.float32)))
    w = torch.nn.Parameter(torch.from_numpy(ws["w"].reshape(size[3], -1).astype(np.float32)))
    b = torch.nn.Parameter(torch.from_numpy(ws["b"].astype(np.float32)))
    opt = torch.optim.Adam([kernel, bias, w, b], lr=LR, eps=1e-8)
    xt = torch.from_numpy(xs.transpose(0, 1, 4, 2, 3).copy())  # NCHW
    yt = torch.from_numpy(ys)

    def step(i: int) -> float:
        opt.zero_grad(set_to_none=False)
        h = F.max_pool2d(F.relu(F.conv2d(xt[i % nb], kernel, bias, padding=1)), 2)
        logits = h.permute(0, 2, 3, 1).reshape(h.shape[0], -1) @ w.T + b
        loss = F.cross_entropy(logits, yt[i % nb])
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def run(quick: bool = False) -> list[Row]:
    g = "convnet"
    size = QUICK if quick else FULL
    try:
        import torch
    except ImportError:
        return [Row(g, "torch eager / ocannl step", "skipped: torch not installed",
                    f"<= {TARGET:g}x")]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        xs, ys = data(size)
        ws = weights(size)
        ours, _ = ocannl_step(size, xs, ys, ws)
        theirs = torch_step(size, xs, ys, ws)
        worst = 0.0
        for i in range(3):
            ours(i)
            a, t = ours.loss(), theirs(i)  # type: ignore[attr-defined]
            worst = max(worst, abs(a - t) / abs(t))
        if worst > LOSS_RTOL:
            raise RuntimeError(f"convnet benchmark: the first losses differ from PyTorch by "
                               f"{worst:.3g} relative (> {LOSS_RTOL:g})")
        t = measure_all({"ocannl_ast": ours, "torch eager": theirs},
                        rounds=3 if quick else 9, round_s=0.01 if quick else 0.2)
    finally:
        torch.set_num_threads(threads)
    flops = conv_flops(size)
    n, mm_gflops = bench_matmul.matmul_gflops(quick)
    got = flops / t["ocannl_ast"].median / 1e9
    return [
        Row(g, "first 3 losses vs torch (max rel. diff)", f"{worst:.2g}", "<= 1e-4", True),
        Row(g, "ocannl_ast step, 1 thread", t["ocannl_ast"].show("ms")),
        Row(g, "torch eager step, 1 thread", t["torch eager"].show("ms")),
        ratio_row(g, "ocannl / torch eager, 1 thread", t["ocannl_ast"].median /
                  t["torch eager"].median, at_most=TARGET),
        Row(g, "ocannl achieved GFLOP/s (model FLOPs), 1 thread", f"{got:.3g}"),
        ratio_row(g, f"achieved / matmul n={n} GFLOP/s (aim >= 0.5)", got / mm_gflops),
        Row(g, "load average (1, 5, 15 min)", " ".join(f"{x:.2f}" for x in os.getloadavg())),
    ]


def conv_flops(size: tuple[int, ...]) -> float:
    """2 x multiply-adds of the conv and the dense layer, forward + backward (x3)."""
    batch, side, ch, classes, _ = size
    conv = batch * side * side * ch * 9
    fc = batch * (side // 2) ** 2 * ch * classes
    return 2.0 * 3.0 * (conv + fc)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few rounds")
    print_table(run(ap.parse_args().quick))
