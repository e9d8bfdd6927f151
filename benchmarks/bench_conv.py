"""2-D valid convolution, batch 8, 32x32 images, 16 -> 32 channels, 3x3 kernel: ocannl_ast's
compiled affine einsum `b| oh<+kh, ow<+kw, ic; kh, kw, ic -> oc => b| oh, ow, oc` against
im2col + NumPy matmul (BLAS limited to 1 thread; the im2col copy is timed too) and
torch.nn.functional.conv2d with 1 thread when torch is installed.

Run: `.venv/bin/python benchmarks/bench_conv.py [--quick]` (or benchmarks/run_all.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    Row,
    Stat,
    blas_threads,
    have_threadpoolctl,
    measure_all,
    print_table,
    ratio_row,
    run_worker,
    thread_control_method,
)

SPEC = "b| oh<+kh, ow<+kw, ic; kh, kw, ic -> oc => b| oh, ow, oc"
FULL = (8, 32, 16, 32, 3)  # batch, image side, in channels, out channels, kernel side
QUICK = (2, 8, 3, 4, 3)
TARGET = 1.0  # the performance issue: valid conv at least as fast as im2col + BLAS


def operands(size: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    b, n, ci, co, k = size
    rng = np.random.default_rng(0)
    return (rng.standard_normal((b, n, n, ci)).astype(np.float32),
            rng.standard_normal((co, k, k, ci)).astype(np.float32))


def im2col_conv(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid conv, NHWC input, (out, kh, kw, in) kernel: patches copied into a matrix, one
    BLAS matmul."""
    co, k = w.shape[0], w.shape[1]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(1, 2))  # b,oh,ow,ci,kh,kw
    b, oh, ow = win.shape[:3]
    cols = np.ascontiguousarray(win).reshape(b * oh * ow, -1)
    wmat = w.transpose(0, 3, 1, 2).reshape(co, -1)  # (co, ci*kh*kw), matches cols' order
    return (cols @ wmat.T).reshape(b, oh, ow, co)


def ocannl_conv(size: tuple[int, ...]) -> Callable[[int], None]:
    import ocannl_ast as oc  # here: the NumPy worker process does not need it

    x, w = operands(size)
    y = oc.einsum(SPEC, oc.ndarray(x, batch_axes=1), oc.ndarray(w, input_axes=3))
    ctx = oc.Context()
    routine = ctx.compile(y.forward)
    routine()
    ref = im2col_conv(x.astype(np.float64), w.astype(np.float64))
    got = ctx.get(y)
    if got.shape != ref.shape or not np.allclose(got, ref, rtol=1e-4, atol=1e-4):
        raise RuntimeError("conv benchmark: ocannl_ast result differs from im2col")
    return lambda i: routine()


def torch_conv(size: tuple[int, ...]) -> Callable[[int], None] | None:
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    x, w = operands(size)
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    wt = torch.from_numpy(np.ascontiguousarray(w.transpose(0, 3, 1, 2)))
    with torch.no_grad():
        got = torch.nn.functional.conv2d(xt, wt).numpy().transpose(0, 2, 3, 1)
    if not np.allclose(got, im2col_conv(x, w), rtol=1e-3, atol=1e-3):
        raise RuntimeError("conv benchmark: torch conv2d differs from im2col")

    def step(i: int) -> None:
        with torch.no_grad():
            torch.nn.functional.conv2d(xt, wt)

    return step


def numpy_time(size: tuple[int, ...], quick: bool) -> Stat:
    x, w = operands(size)
    return measure_all({"": lambda i: im2col_conv(x, w)}, rounds=3 if quick else 7,
                       round_s=0.01 if quick else 0.2)[""]


def run(quick: bool = False) -> list[Row]:
    size = QUICK if quick else FULL
    fns = {"ocannl_ast": ocannl_conv(size)}
    tc = torch_conv(size)
    if tc is not None:
        fns["torch conv2d 1 thread"] = tc
    times = measure_all(fns, rounds=3 if quick else 7, round_s=0.01 if quick else 0.2)
    if have_threadpoolctl():
        with blas_threads(1):
            times["im2col + numpy 1 thread"] = numpy_time(size, quick)
    else:
        args = ["--numpy-worker"] + (["--quick"] if quick else [])
        times["im2col + numpy 1 thread"] = Stat(*run_worker(Path(__file__), args, threads=1))
    b, n, ci, co, k = size
    g = f"conv {b}x{n}x{n} {ci}->{co} ch {k}x{k}"
    rows = [Row(g, "BLAS thread control", thread_control_method())]
    rows += [Row(g, name, st.show()) for name, st in times.items()]
    ours = times["ocannl_ast"].median
    rows.append(ratio_row(g, "speed vs im2col + numpy 1 thread",
                          times["im2col + numpy 1 thread"].median / ours,
                          at_least=None if quick else TARGET))
    if tc is not None:
        rows.append(ratio_row(g, "speed vs torch conv2d 1 thread",
                              times["torch conv2d 1 thread"].median / ours))
    else:
        rows.append(Row(g, "speed vs torch conv2d 1 thread", "skipped: torch not installed"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few rounds")
    ap.add_argument("--numpy-worker", action="store_true",
                    help="internal: time only im2col + NumPy (BLAS threads set by the environment)")
    args = ap.parse_args()
    if args.numpy_worker:
        st = numpy_time(QUICK if args.quick else FULL, args.quick)
        print(json.dumps([st.median, st.lo, st.hi]))
        return
    print_table(run(args.quick))


if __name__ == "__main__":
    main()
