"""Compile latency of a training step (forward, backprop, SGD with momentum) of a ReLU MLP
(width 32, batch 32) against its depth: 2, 4, 8, 16, 32, 64 layers (--quick: 2 and 4).

Each depth runs REPEATS times (--quick: once), each in a fresh interpreter with a fresh
private cache directory (so gcc really runs on the routine; the contraction kernel's
objects come from the installation's prebuilt directory, `python -m ocannl_ast.prebuilt`,
when it holds them); each stage's figure is the median. Split into
the Python side -- building the graph and training code, shape inference + lowering
(`Context.lower_code`) and C code generation (`render_c_units`) -- then gcc (the C backend's
build: its flags, a large routine's translation units compiled at once, `OCANNL_AST_CC_JOBS`,
then linked) and loading (cffi). A depth that runs past the time limit is
killed and reported as "> limit"; deeper ones are not run.

Run: `.venv/bin/python benchmarks/bench_compile.py [--quick] [--limit S]`.
"""

# Tensor arithmetic operators are installed at import time; mypy cannot see them.
# mypy: disable-error-code="operator, arg-type"

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, WorkerTimeout, print_table, run_worker

FULL_DEPTHS = (2, 4, 8, 16, 32, 64)
QUICK_DEPTHS = (2, 4)
WIDTH, BATCH = 32, 32
PY_TARGET_S, GCC_TARGET_S, GROWTH_TARGET = 0.5, 3.0, 1.2  # at 64 layers; exponent of L
REPEATS = 3


def worker(depth: int, cache: Path) -> dict[str, float]:
    """Time each stage of compiling the depth-`depth` MLP step (in this fresh process)."""
    import cffi

    import ocannl_ast as oc
    from ocannl_ast.backends import compiler
    from ocannl_ast.backends.c_backend import c_ident, render_c_units
    from ocannl_ast.backends.c_syntax import C

    t0 = time.perf_counter()
    h = oc.ndarray(np.zeros((BATCH, 8), np.float32), batch_axes=1)
    for i in range(depth):
        last = i == depth - 1
        w = oc.param(f"w{i}", output_dims=[1 if last else WIDTH])
        b = oc.param(f"b{i}", output_dims=[1 if last else WIDTH])
        h = w @ h + b if last else oc.relu(w @ h + b)
    loss = oc.einsum("b|o=>o", oc.relu(1.0 - h)) * (1.0 / BATCH)
    code = [oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.01, momentum=0.9)]
    t1 = time.perf_counter()
    prog, _, _ = oc.Context().lower_code(code, name=f"mlp{depth}")
    t2 = time.perf_counter()
    units, extra_flags, objects = render_c_units(prog)
    t3 = time.perf_counter()
    cname = c_ident(prog.name, "ocannl_")
    flags = (*compiler.effective_flags(compiler.DEFAULT_OPT_FLAGS), *extra_flags)
    so_path = compiler.build_cached(cname, units[0], flags, cache, extra_units=units[1:],
                                    objects=objects).so_path
    t4 = time.perf_counter()
    ffi = cffi.FFI()
    ffi.cdef(C.cdef(cname, "float"))  # the entry point: a pointer table, a statics array
    getattr(ffi.dlopen(str(so_path)), cname)
    t5 = time.perf_counter()
    return {"build": t1 - t0, "lower": t2 - t1, "codegen": t3 - t2, "python": t3 - t0,
            "gcc": t4 - t3, "load": t5 - t4, "lines": sum(u.count("\n") for u in units),
            "units": len(units)}


def growth_exponent(depths: list[int], secs: list[float]) -> float:
    """Least-squares slope of log(time) against log(depth)."""
    return float(np.polyfit(np.log(depths), np.log(secs), 1)[0])


def run(quick: bool = False, limit: float | None = None) -> list[Row]:
    depths = QUICK_DEPTHS if quick else FULL_DEPTHS
    limit = limit or (60.0 if quick else 240.0)
    rows: list[Row] = []
    done: dict[int, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="ocannl_bench_cc_") as tmp:
        for depth in depths:
            g = f"compile MLP L={depth}"
            try:
                runs = [run_worker(Path(__file__),
                                   ["--worker", str(depth), str(Path(tmp) / f"{depth}_{k}")],
                                   timeout=limit) for k in range(1 if quick else REPEATS)]
            except WorkerTimeout:
                rows.append(Row(g, "python + gcc + load", f"> {limit:g} s (aborted)"))
                rows += [Row(f"compile MLP L={d}", "python + gcc + load", "not run")
                         for d in depths if d > depth]
                break
            done[depth] = r = {key: float(np.median([x[key] for x in runs])) for key in runs[0]}
            rows.append(Row(g, "python side (build + infer/lower + codegen)",
                            f"{r['python']:.3g} s ({r['build']:.2g} + {r['lower']:.3g} + "
                            f"{r['codegen']:.2g}), {int(r['lines'])} C lines"))
            n = int(r["units"])
            rows.append(Row(g, f"gcc ({n} C file{'s at once' if n > 1 else ''}) | load",
                            f"{r['gcc']:.3g} s | {r['load'] * 1e3:.3g} ms"))
    return rows + summary_rows(done, quick)


def summary_rows(done: dict[int, dict[str, float]], quick: bool) -> list[Row]:
    rows: list[Row] = []
    deepest = max(FULL_DEPTHS)
    if not quick:
        r = done.get(deepest)
        g = f"compile MLP L={deepest}"
        for key, what, target in (("python", "python side", PY_TARGET_S),
                                  ("gcc", "gcc", GCC_TARGET_S)):
            sec = r[key] if r else math.inf
            shown = f"{sec:.3g} s" if r else "not measured (over the time limit)"
            rows.append(Row(g, what, shown, f"<= {target:g} s", sec <= target))
    fit = [d for d in sorted(done) if d >= 8] if not quick else sorted(done)
    if len(fit) >= 2:
        e = growth_exponent(fit, [done[d]["python"] for d in fit])
        rows.append(Row("compile MLP", f"python side growth ~ L^e, fit over L={fit}",
                        f"e = {e:.2f}", "" if quick else f"<= {GROWTH_TARGET:g} (linear)",
                        None if quick else e <= GROWTH_TARGET))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="depths 2 and 4 only")
    ap.add_argument("--limit", type=float, help="seconds per depth (default 240; quick 60)")
    ap.add_argument("--worker", nargs=2, metavar=("DEPTH", "CACHE_DIR"), help="internal")
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(int(args.worker[0]), Path(args.worker[1]))))
        return
    print_table(run(args.quick, args.limit))


if __name__ == "__main__":
    main()
