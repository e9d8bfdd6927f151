"""Run the whole benchmark suite and print one table: every figure measured in this run,
each ratio with its target (from the performance issue) and whether it is met.

Run: `.venv/bin/python benchmarks/run_all.py [--quick] [--only NAME ...] [--json FILE]`.
--quick uses tiny sizes and short rounds (targets shown, not judged); the full run takes a few minutes.
Times are medians of repeated rounds with [min-max]; on a shared machine trust the ratios.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_compile
import bench_conv
import bench_convnet
import bench_cuda
import bench_import
import bench_matmul
import bench_moons_step
import bench_transformer
from common import Row, print_table

BENCHMARKS: dict[str, Callable[[bool], list[Row]]] = {
    "moons": bench_moons_step.run,
    "matmul": bench_matmul.run,
    "conv": bench_conv.run,
    "transformer": bench_transformer.run,
    "convnet": bench_convnet.run,
    "compile": bench_compile.run,
    "import": bench_import.run,
    "cuda": bench_cuda.run,
}


def collect(quick: bool, only: list[str] | None = None) -> list[Row]:
    rows: list[Row] = []
    for name, bench in BENCHMARKS.items():
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        print(f"running {name} ...", file=sys.stderr, flush=True)
        got = bench(quick)
        if quick:  # tiny sizes and short rounds: show the targets, judge none
            got = [dataclasses.replace(r, met=None) for r in got]
        rows += got
        print(f"  {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return rows


def main(argv: list[str] | None = None) -> list[Row]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few rounds")
    ap.add_argument("--only", nargs="+", choices=list(BENCHMARKS), help="run only these")
    ap.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    os.environ.pop("OCANNL_AST_CHECK", None)  # IR verification would distort the timings
    rows = collect(args.quick, args.only)
    print(f"ocannl_ast benchmarks{' (--quick: tiny sizes, targets not judged)' if args.quick else ''}"
          f" -- {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}")
    print_table(rows)
    print("load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()))
    targets = [r for r in rows if r.met is not None]
    if targets:
        print(f"\n{sum(1 for r in targets if r.met)}/{len(targets)} targets met")
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
    return rows


if __name__ == "__main__":
    main()
