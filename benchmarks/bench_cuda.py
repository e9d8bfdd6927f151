"""GPU mode: the moons training step and float32 matmul (n = 1024, 4096) on the CUDA backend
against the C backend and PyTorch CUDA (when installed), ratios measured in one run.

Without a GPU (or cuda-python) the CUDA figures are reported as skipped with the reason and
only the C backend's times are measured. Times include a stream synchronization per call.

Run: `.venv/bin/python benchmarks/bench_cuda.py [--quick]` (or benchmarks/run_all.py).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, measure_all, print_table, ratio_row

import ocannl_ast as oc

FULL_SIZES = (1024, 4096)
QUICK_SIZES = (64,)
C_MAX = 1024  # the single-threaded C matmul at 4096 takes minutes: not timed


def cuda_missing() -> str | None:
    try:
        oc.Context(backend="cuda")
    except oc.BackendError as e:
        reason = str(e).splitlines()[0].split(": ", 1)[-1]  # without the location
        return reason if len(reason) <= 70 else reason[:67] + "..."
    return None


def _sync() -> None:
    from ocannl_ast.backends.cuda_runtime import synchronize

    synchronize()


def matmul_fn(backend: str, n: int) -> Callable[[int], None]:
    rng = np.random.default_rng(0)
    a = oc.ndarray(rng.standard_normal((n, n)).astype(np.float32), label="a")
    b = oc.ndarray(rng.standard_normal((n, n)).astype(np.float32), label="b")
    y = oc.einsum("ij;jk=>ik", a, b)
    ctx = oc.Context(backend=backend)
    r = ctx.compile(y.forward)
    r()
    if n <= 256:  # check values where NumPy is quick
        want = a.init_value.astype(np.float64) @ b.init_value.astype(np.float64)  # type: ignore
        np.testing.assert_allclose(ctx.get(y), want, rtol=1e-3, atol=1e-3)
    if backend == "cuda":
        return lambda i: (r(), _sync())[0]
    return lambda i: r()


def moons_fn(backend: str, batch: int) -> Callable[[int], None]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "backends"))
    import cuda_cases

    case = cuda_cases.moons_step(n=batch * 8, batch=batch)
    ctx = oc.Context(backend=backend)
    step = ctx.compile(case["code"])
    nb = case["n_batches"]
    step(batch=0, step=0)
    if backend == "cuda":
        return lambda i: (step(batch=i % nb, step=i), _sync())[0]
    return lambda i: step(batch=i % nb, step=i)


def torch_matmul(n: int) -> Callable[[int], None] | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    return lambda i: (a @ b, torch.cuda.synchronize())[0]


def _rows(group: str, fns: dict[str, Callable[[int], None]], rounds: int) -> list[Row]:
    times = measure_all(fns, rounds=rounds, round_s=0.1)
    rows = [Row(group, f"{name} time per call", times[name].show()) for name in fns]
    if "cuda" in times and "c" in times:
        rows.append(ratio_row(group, "speed-up of cuda over c",
                              times["c"].median / times["cuda"].median))
    if "cuda" in times and "torch cuda" in times:
        rows.append(ratio_row(group, "cuda time / torch cuda time",
                              times["cuda"].median / times["torch cuda"].median))
    return rows


def run(quick: bool) -> list[Row]:
    missing = cuda_missing()
    rounds = 3 if quick else 7
    rows: list[Row] = []
    for batch in (16,) if quick else (32, 1024):
        group = f"cuda moons B={batch}"
        fns = {"c": moons_fn("c", batch)}
        if missing is None:
            fns["cuda"] = moons_fn("cuda", batch)
        rows += _rows(group, fns, rounds)
        if missing is not None:
            rows.append(Row(group, "cuda step", f"skipped: {missing}"))
    for n in QUICK_SIZES if quick else FULL_SIZES:
        group = f"cuda matmul n={n}"
        fns = {"c": matmul_fn("c", n)} if n <= C_MAX else {}
        if missing is None:
            fns["cuda"] = matmul_fn("cuda", n)
            tm = torch_matmul(n)
            if tm is not None:
                fns["torch cuda"] = tm
        if fns:
            rows += _rows(group, fns, rounds)
        if missing is not None:
            rows.append(Row(group, "cuda matmul", f"skipped: {missing}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    print_table(run(ap.parse_args().quick))


if __name__ == "__main__":
    main()
