"""Time one moons training step (forward, backprop, SGD with momentum; batch 32, MLP
2-16-16-1, hinge loss) in ocannl_ast's compiled C routine, a NumPy implementation of the
same step, and PyTorch CPU eager when torch is installed; prints ratios from one run.

Run: `.venv/bin/python benchmarks/bench_moons_step.py` (see README).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

import ocannl_ast as oc  # noqa: E402
from moons import half_moons, make_model  # noqa: E402

BATCH, N = 32, 1024
LR, MOM = 0.05, 0.9


def timeit(fn: Callable[[int], None], steps: int) -> float:
    """Median seconds per call over 5 rounds of `steps` calls (after a warm-up round)."""
    fn_round = lambda: [fn(i) for i in range(steps)]  # noqa: E731
    fn_round()
    rounds = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn_round()
        rounds.append((time.perf_counter() - t0) / steps)
    return float(np.median(rounds))


def ocannl_step(xs: np.ndarray, ys: np.ndarray) -> Callable[[int], None]:
    nb = N // BATCH
    x_all = oc.ndarray(xs.reshape(nb, BATCH, 2), batch_axes=2)
    y_all = oc.ndarray(ys.reshape(nb, BATCH, 1), batch_axes=2)
    b = oc.static_index("batch")
    model = make_model()
    margin = oc.relu(1.0 - y_all.batch_slice(b) * model(x_all.batch_slice(b)))
    loss = oc.einsum("b|o=>o", margin) * (1.0 / BATCH)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss),
                        oc.sgd_update(loss, learning_rate=LR, momentum=MOM)])
    return lambda i: step(batch=i % nb)


def numpy_step(xs: np.ndarray, ys: np.ndarray) -> Callable[[int], None]:
    rng = np.random.default_rng(0)
    ps = [rng.uniform(-1, 1, s).astype(np.float32)
          for s in [(16, 2), (16,), (16, 16), (16,), (1, 16), (1,)]]
    ms = [np.zeros_like(p) for p in ps]
    x32, y32 = xs.astype(np.float32), ys.astype(np.float32)

    def step(i: int) -> None:
        s = (i % (N // BATCH)) * BATCH
        x, y = x32[s:s + BATCH], y32[s:s + BATCH]
        w1, b1, w2, b2, w3, b3 = ps
        z1 = x @ w1.T + b1
        h1 = np.maximum(z1, 0)
        z2 = h1 @ w2.T + b2
        h2 = np.maximum(z2, 0)
        out = (h2 @ w3.T + b3)[:, 0]
        m = 1 - y * out
        gout = np.where(m > 0, -y, 0).astype(np.float32) / BATCH
        g3 = gout[None, :] @ h2
        gb3 = gout.sum(keepdims=True)
        gh2 = gout[:, None] @ w3 * (z2 > 0)
        g2 = gh2.T @ h1
        gh1 = gh2 @ w2 * (z1 > 0)
        grads = [gh1.T @ x, gh1.sum(0), g2, gh2.sum(0), g3, gb3]
        for p, mo, g in zip(ps, ms, grads, strict=True):
            mo *= MOM
            mo += g
            p -= LR * mo

    return step


def torch_step(xs: np.ndarray, ys: np.ndarray) -> Callable[[int], None] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOM)
    xt = torch.tensor(xs, dtype=torch.float32)
    yt = torch.tensor(ys, dtype=torch.float32)

    def step(i: int) -> None:
        s = (i % (N // BATCH)) * BATCH
        opt.zero_grad()
        out = model(xt[s:s + BATCH])[:, 0]
        loss = torch.relu(1 - yt[s:s + BATCH] * out).mean()
        loss.backward()
        opt.step()

    return step


def main() -> None:
    xs, ys = half_moons(N, 0.1, 1)
    steps = 2000
    results = {"ocannl_ast (C)": timeit(ocannl_step(xs, ys), steps),
               "numpy": timeit(numpy_step(xs, ys), steps)}
    ts = torch_step(xs, ys)
    if ts is not None:
        results["torch eager (CPU, 1 thread)"] = timeit(ts, steps // 4)
    base = results["ocannl_ast (C)"]
    for name, sec in results.items():
        print(f"{name:30s} {sec * 1e6:9.2f} us/step   {sec / base:7.2f}x ocannl_ast")


if __name__ == "__main__":
    main()
