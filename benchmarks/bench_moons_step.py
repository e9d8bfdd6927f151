"""Time one moons training step (MLP 2-16-16-1 ReLU, hinge loss, backprop, SGD with
momentum) at batch 20 and 200 on a resident data set, in: ocannl_ast's compiled routine
(called as users call it, and its bare compiled kernel), a hand-fused C step
(moons_fused.c, same gcc flags, same cffi calling path), NumPy, and PyTorch CPU eager with
one thread when torch is installed. All start from the same parameters and are checked to
compute the same step before they are timed.

Run: `.venv/bin/python benchmarks/bench_moons_step.py [--quick]` (or benchmarks/run_all.py).
"""

# Tensor arithmetic operators are installed at import time; mypy cannot see them.
# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))

from common import HandRoutine, Row, Stat, blas_threads, measure_all, print_table, ratio_row
from moons import half_moons

import ocannl_ast as oc

N = 1000  # data set size: 50 batches of 20, 5 of 200
LR, MOM = 0.05, 0.9
SHAPES = [(16, 2), (16,), (16, 16), (16,), (1, 16), (1,)]  # w1 b1 w2 b2 w3 b3
TARGETS = {20: (1.0, 100.0), 200: (1.0, 15.0)}  # vs hand C (at most), torch/ocannl (at least)
CHECK_STEPS = 5

Step = Callable[[int], None]  # step(i) trains on batch i % n_batches


def init_params() -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, s).astype(np.float32) for s in SHAPES]


def ocannl_step(xs: np.ndarray, ys: np.ndarray, batch: int
                ) -> tuple[oc.Routine, Callable[[], list[np.ndarray]]]:
    nb = N // batch
    x_all = oc.ndarray(xs.reshape(nb, batch, 2), batch_axes=2)
    y_all = oc.ndarray(ys.reshape(nb, batch, 1), batch_axes=2)
    b = oc.static_index("batch")
    w1, b1, w2, b2, w3, b3 = (
        oc.param(f"{n}", output_dims=list(v.shape[:1]), input_dims=list(v.shape[1:]) or None,
                 init=v)
        for n, v in zip(["w1", "b1", "w2", "b2", "w3", "b3"], init_params(), strict=True))
    params = [w1, b1, w2, b2, w3, b3]
    h1 = oc.relu(w1 @ x_all.batch_slice(b) + b1)
    h2 = oc.relu(w2 @ h1 + b2)
    out = w3 @ h2 + b3
    margin = oc.relu(1.0 - y_all.batch_slice(b) * out)
    loss = oc.einsum("b|o=>o", margin) * (1.0 / batch)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=LR, momentum=MOM)])
    return step, lambda: [ctx.get(p) for p in params]


def hand_step(xs: np.ndarray, ys: np.ndarray, batch: int
              ) -> tuple[Step, Callable[[], list[np.ndarray]]]:
    source = f"#define BATCH {batch}\n#define LR {LR!r}f\n#define MOM {MOM!r}f\n"
    source += (Path(__file__).resolve().parent / "moons_fused.c").read_text()
    routine = HandRoutine(source, "moons_fused", n_arrays=5, n_static=1)
    params = np.concatenate([p.reshape(-1) for p in init_params()])
    arrays = [params, np.zeros_like(params), xs.astype(np.float32).reshape(-1),
              ys.astype(np.float32), np.zeros(1, np.float32)]
    nb = N // batch

    def unpack() -> list[np.ndarray]:
        sizes = np.cumsum([int(np.prod(s)) for s in SHAPES])[:-1]
        return [p.reshape(s) for p, s in zip(np.split(params, sizes), SHAPES, strict=True)]

    def step(i: int) -> None:
        routine(arrays, (i % nb,))

    step.bare = routine.bare(arrays)  # type: ignore[attr-defined]
    return step, unpack


def numpy_step(xs: np.ndarray, ys: np.ndarray, batch: int
               ) -> tuple[Step, Callable[[], list[np.ndarray]]]:
    ps = init_params()
    ms = [np.zeros_like(p) for p in ps]
    x32, y32 = xs.astype(np.float32), ys.astype(np.float32)
    nb = N // batch

    def step(i: int) -> None:
        s = (i % nb) * batch
        x, y = x32[s:s + batch], y32[s:s + batch]
        w1, b1, w2, b2, w3, b3 = ps
        z1 = x @ w1.T + b1
        h1 = np.maximum(z1, 0)
        z2 = h1 @ w2.T + b2
        h2 = np.maximum(z2, 0)
        out = (h2 @ w3.T + b3)[:, 0]
        m = 1 - y * out
        step.loss = float(np.maximum(m, 0).sum() / batch)  # type: ignore[attr-defined]
        gout = np.where(m > 0, -y, 0).astype(np.float32) / batch
        gh2 = gout[:, None] @ w3 * (z2 > 0)
        gh1 = gh2 @ w2 * (z1 > 0)
        grads = [gh1.T @ x, gh1.sum(0), gh2.T @ h1, gh2.sum(0), gout[None, :] @ h2,
                 gout.sum(keepdims=True)]
        for p, mo, g in zip(ps, ms, grads, strict=True):
            mo *= MOM
            mo += g
            p -= LR * mo

    return step, lambda: ps


def torch_step(xs: np.ndarray, ys: np.ndarray, batch: int
               ) -> tuple[Step, Callable[[], list[np.ndarray]]] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(),
                                torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    tparams = [model[0].weight, model[0].bias, model[2].weight, model[2].bias,
               model[4].weight, model[4].bias]
    with torch.no_grad():
        for tp, v in zip(tparams, init_params(), strict=True):
            tp.copy_(torch.from_numpy(v))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOM)
    xt = torch.tensor(xs, dtype=torch.float32)
    yt = torch.tensor(ys, dtype=torch.float32)
    nb = N // batch

    def step(i: int) -> None:
        s = (i % nb) * batch
        opt.zero_grad()
        out = model(xt[s:s + batch])[:, 0]
        loss = torch.relu(1 - yt[s:s + batch] * out).mean()
        loss.backward()
        opt.step()

    return step, lambda: [tp.detach().numpy().copy() for tp in tparams]


def check_same(name: str, got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Every implementation must compute the same step: compare params after a few steps."""
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        if g.shape != w.shape or not np.allclose(g, w, rtol=1e-4, atol=1e-5):
            err = np.abs(g.reshape(w.shape) - w).max() if g.size == w.size else "shape"
            raise RuntimeError(f"moons benchmark: {name} disagrees with NumPy on parameter "
                               f"{k} after {CHECK_STEPS} steps (max error {err})")


def implementations(batch: int) -> dict[str, Step]:
    xs, ys = half_moons(N, 0.1, 1)
    routine, oc_params = ocannl_step(xs, ys, batch)
    nb = N // batch
    kernel, arrays = routine.compiled, routine.arrays
    impls: dict[str, tuple[Step, Callable[[], list[np.ndarray]]]] = {
        "ocannl_ast routine": (lambda i: routine(batch=i % nb), oc_params),
        "hand-fused C": hand_step(xs, ys, batch),
        "numpy": numpy_step(xs, ys, batch),
    }
    ts = torch_step(xs, ys, batch)
    if ts is not None:
        impls["torch eager 1 thread"] = ts
    for step, _ in impls.values():
        for i in range(CHECK_STEPS):
            step(i)
    want = impls["numpy"][1]()
    for name, (_, get) in impls.items():
        check_same(name, get(), want)
    steps = {name: s for name, (s, _) in impls.items()}
    # the bare kernel: the routine's compiled C function with its arrays, no Routine checks
    steps["ocannl_ast kernel"] = lambda i: kernel(arrays, (i % nb,))
    steps |= c_entries(routine, impls["hand-fused C"][0], nb)
    return steps


def c_entries(routine: oc.Routine, hand: Step, nb: int) -> dict[str, Step]:
    """The generated C and the hand-fused C alone: each function called straight through
    cffi (the routine's entry point with its pointer table, the hand function with its
    pointers), no Python wrapper in between, so the two C codes compare by themselves."""
    routine(batch=0)
    fn, table, st, _ = routine.compiled.entry()
    bare = hand.bare  # type: ignore[attr-defined]

    def ours(i: int) -> None:
        st[0] = i % nb
        fn(table, st)

    return {"ocannl_ast C entry": ours, "hand-fused C function": lambda i: bare(i % nb)}


def run(quick: bool = False) -> list[Row]:
    rows: list[Row] = []
    with blas_threads(1):
        for batch in (20, 200):
            times = measure_all(implementations(batch), rounds=3 if quick else 9,
                                round_s=0.01 if quick else 0.1)
            rows += moons_rows(batch, times)
    return rows


def moons_rows(batch: int, t: dict[str, Stat]) -> list[Row]:
    g = f"moons B={batch}"
    rows = [Row(g, f"{name} per step", st.show("us")) for name, st in t.items()]
    at_most, at_least = TARGETS[batch]
    hand = t["hand-fused C"].median
    rows.append(ratio_row(g, "ocannl routine / hand-fused C (slowdown)",
                          t["ocannl_ast routine"].median / hand, at_most=at_most))
    rows.append(ratio_row(g, "ocannl kernel / hand-fused C (slowdown)",
                          t["ocannl_ast kernel"].median / hand, at_most=at_most))
    rows.append(ratio_row(g, "the C codes alone: generated / hand-fused (same cffi call)",
                          t["ocannl_ast C entry"].median / t["hand-fused C function"].median))
    rows.append(ratio_row(g, "numpy / ocannl routine (speedup)",
                          t["numpy"].median / t["ocannl_ast routine"].median))
    if "torch eager 1 thread" in t:
        rows.append(ratio_row(g, "torch eager / ocannl routine (speedup)",
                              t["torch eager 1 thread"].median / t["ocannl_ast routine"].median,
                              at_least=at_least))
    else:
        rows.append(Row(g, "torch eager / ocannl routine (speedup)",
                        "skipped: torch not installed", f">= {at_least:g}x"))
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="few short rounds")
    print_table(run(ap.parse_args().quick))
