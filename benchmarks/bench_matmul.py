"""float32 matmul (n = 512, 1024 and 2048) and a batched matmul: ocannl_ast's compiled
`oc.einsum("ij;jk=>ik", a, b)` against NumPy (its BLAS) limited to 1 and to 2 threads.

ocannl_ast is measured with its contraction kernel at 1 thread (the default) and at 2
(`OCANNL_AST_THREADS=2`, OpenMP); the 2-thread comparison uses the latter. BLAS threads are
limited with threadpoolctl when installed, and then each of our routines and NumPy's matmul
are timed in the same process with their rounds interleaved (other load on the machine hits
both alike); the table gives the median and the fastest round of each, the ratio of the
medians (the target), of the fastest rounds, and of the median CPU times (process_time: the
time the process ran, less sensitive to other processes taking the cores). Without
threadpoolctl the NumPy side runs in a subprocess with OPENBLAS/OMP/MKL_NUM_THREADS set (the
table says which) and only wall times are compared.

Run: `.venv/bin/python benchmarks/bench_matmul.py [--quick]` (or benchmarks/run_all.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Row,
    Stat,
    blas_threads,
    calibrate,
    fmt_time,
    have_threadpoolctl,
    measure_all,
    print_table,
    ratio_row,
    run_worker,
    stat_of,
    thread_control_method,
)

#: name -> (einsum spec, shape of a, shape of b, target at 1 thread, target at 2 threads)
Case = tuple[str, tuple[int, ...], tuple[int, ...], float | None, float | None]
FULL: dict[str, Case] = {
    "matmul n=512": ("ij;jk=>ik", (512, 512), (512, 512), 0.9, 0.5),
    "matmul n=1024": ("ij;jk=>ik", (1024, 1024), (1024, 1024), 0.9, 0.5),
    "matmul n=2048": ("ij;jk=>ik", (2048, 2048), (2048, 2048), 0.9, 0.5),
    "batched matmul 32x(128x128 @ 128x128)": ("bij;bjk=>bik", (32, 128, 128), (32, 128, 128),
                                              None, None),
}
QUICK: dict[str, Case] = {
    "matmul n=64": ("ij;jk=>ik", (64, 64), (64, 64), None, None),  # tiny: no targets
    "batched matmul 4x(32x32 @ 32x32)": ("bij;bjk=>bik", (4, 32, 32), (4, 32, 32), None, None),
}


def operands(case: Case) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return (rng.standard_normal(case[1]).astype(np.float32),
            rng.standard_normal(case[2]).astype(np.float32))


def ocannl_matmul(case: Case, threads: int = 1) -> Callable[[int], None]:
    """The compiled routine (its kernel using `threads`), after checking its result against
    a float64 reference."""
    import ocannl_ast as oc  # here: the NumPy worker process does not need it

    a, b = operands(case)
    c = oc.einsum(case[0], oc.ndarray(a), oc.ndarray(b))
    ctx = oc.Context()
    saved = os.environ.get("OCANNL_AST_THREADS")
    os.environ["OCANNL_AST_THREADS"] = str(threads)  # read when the routine is rendered
    try:
        routine = ctx.compile(c.forward)
    finally:
        if saved is None:
            del os.environ["OCANNL_AST_THREADS"]
        else:
            os.environ["OCANNL_AST_THREADS"] = saved
    routine()
    ref = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = ctx.get(c)
    tol = 1e-5 * np.sqrt(a.shape[-1]) * np.abs(ref).max()
    if got.shape != ref.shape or np.abs(got - ref).max() > tol:
        raise RuntimeError(f"matmul benchmark: ocannl_ast result for {case} is wrong")
    return lambda i: routine()


def _matmul_into(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> Callable[[int], None]:
    def call(i: int) -> None:
        np.matmul(a, b, out=out)

    return call


def numpy_times(cases: dict[str, Case], quick: bool) -> dict[str, Stat]:
    fns = {name: _numpy_fn(case) for name, case in cases.items()}
    return measure_all(fns, rounds=3 if quick else 5, round_s=0.01 if quick else 0.3)


def numpy_times_at(cases: dict[str, Case], threads: int, quick: bool) -> dict[str, Stat]:
    if have_threadpoolctl():
        with blas_threads(threads):
            return numpy_times(cases, quick)
    args = ["--numpy-worker", str(threads)] + (["--quick"] if quick else [])
    out = run_worker(Path(__file__), args, threads=threads)
    return {name: Stat(*v) for name, v in out.items()}


@dataclass(frozen=True)
class Timed:
    """Seconds per call over rounds: wall clock (median, fastest, slowest) and the median
    CPU time of this process (process_time, all its threads)."""

    wall: Stat
    cpu: float


def measure_interleaved(fns: dict[str, Callable[[int], None]], *, rounds: int,
                        round_s: float) -> dict[str, Timed]:
    """`common.measure_all` with process_time too: the rounds of all `fns` interleaved."""
    calls = {name: calibrate(fn, round_s) for name, fn in fns.items()}
    wall: dict[str, list[float]] = {name: [] for name in fns}
    cpu: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            n = calls[name]
            t0, c0 = time.perf_counter(), time.process_time()
            for i in range(n):
                fn(i)
            wall[name].append((time.perf_counter() - t0) / n)
            cpu[name].append((time.process_time() - c0) / n)
    return {name: Timed(stat_of(wall[name]), float(np.median(cpu[name]))) for name in fns}


def _numpy_fn(case: Case) -> Callable[[int], None]:
    a, b = operands(case)
    out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]),
                   np.float32)
    return _matmul_into(a, b, out)


def _rows(name: str, threads: int, ours: Timed, ref: Timed, target: float | None) -> list[Row]:
    who = "1 thread" if threads == 1 else f"{threads} threads"
    return [Row(name, f"ocannl_ast ({who})", ours.wall.show() + f"  cpu {fmt_time(ours.cpu)}"),
            Row(name, f"numpy {who}", ref.wall.show() + f"  cpu {fmt_time(ref.cpu)}"),
            ratio_row(name, f"speed vs numpy {who}", ref.wall.median / ours.wall.median,
                      at_least=target,
                      note=f"fastest rounds {ref.wall.lo / ours.wall.lo:.3g}x, "
                           f"cpu {ref.cpu / ours.cpu:.3g}x")]


def run(quick: bool = False) -> list[Row]:
    cases = QUICK if quick else FULL
    rounds, round_s = (3, 0.01) if quick else (9, 0.3)
    if not have_threadpoolctl():
        return _run_subprocess(cases, quick)
    rows = [Row("matmul", "BLAS thread control", thread_control_method()),
            Row("matmul", "load average (1 min) before", f"{os.getloadavg()[0]:.2f}")]
    per: dict[int, dict[str, Timed]] = {}
    for threads in (1, 2):
        fns = {name: ocannl_matmul(c, threads) for name, c in cases.items()}
        fns |= {"numpy " + name: _numpy_fn(c) for name, c in cases.items()}
        with blas_threads(threads):
            per[threads] = measure_interleaved(fns, rounds=rounds, round_s=round_s)
    for name, (_, _, _, t1, t2) in cases.items():
        for threads, target in ((1, t1), (2, t2)):
            got = per[threads]
            rows += _rows(name, threads, got[name], got["numpy " + name], target)
    rows.append(Row("matmul", "load average (1 min) after", f"{os.getloadavg()[0]:.2f}"))
    return rows


def _run_subprocess(cases: dict[str, Case], quick: bool) -> list[Row]:
    """Without threadpoolctl: ours in process, NumPy in subprocesses (wall times only)."""
    fns = {name: ocannl_matmul(c) for name, c in cases.items()}
    fns |= {name + " @2": ocannl_matmul(c, 2) for name, c in cases.items()}
    ours = measure_all(fns, rounds=3 if quick else 5, round_s=0.01 if quick else 0.3)
    np1, np2 = (numpy_times_at(cases, t, quick) for t in (1, 2))
    rows = [Row("matmul", "BLAS thread control", thread_control_method())]
    for name, (_, _, _, t1, t2) in cases.items():
        g = name
        two = ours[name + " @2"]
        rows += [Row(g, "ocannl_ast (1 thread)", ours[name].show()),
                 Row(g, "ocannl_ast (OCANNL_AST_THREADS=2)", two.show()),
                 Row(g, "numpy 1 thread", np1[name].show()),
                 Row(g, "numpy 2 threads", np2[name].show()),
                 ratio_row(g, "speed vs numpy 1 thread", np1[name].median / ours[name].median,
                           at_least=t1),
                 ratio_row(g, "speed at 2 threads vs numpy 2 threads",
                           np2[name].median / two.median, at_least=t2)]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few rounds")
    ap.add_argument("--numpy-worker", type=int, metavar="THREADS",
                    help="internal: time only NumPy (BLAS threads set by the environment)")
    args = ap.parse_args()
    if args.numpy_worker is not None:
        times = numpy_times(QUICK if args.quick else FULL, args.quick)
        print(json.dumps({k: [v.median, v.lo, v.hi] for k, v in times.items()}))
        return
    print_table(run(args.quick))


if __name__ == "__main__":
    main()


def matmul_gflops(quick: bool) -> tuple[int, float]:
    """(n, GFLOP/s) of ocannl_ast's float32 n x n matmul at 1 thread: the yardstick of the
    model benchmarks' achieved GFLOP/s."""
    n = 64 if quick else 256
    case: Case = ("ij;jk=>ik", (n, n), (n, n), None, None)
    t = measure_all({"mm": ocannl_matmul(case)}, rounds=3 if quick else 5,
                    round_s=0.01 if quick else 0.1)["mm"].median
    return n, 2.0 * n ** 3 / t / 1e9
