"""The character-level transformer LM step of the performance issue (transformer_model.py):
ocannl_ast's compiled step against PyTorch eager from the same weights, at 1 thread and at 2
(`OCANNL_AST_THREADS=2` vs `torch.set_num_threads(2)`), and against `torch.compile` where it
works, and against `jax.jit` where jax is installed (transformer_jax.py, one CPU);
achieved GFLOP/s against matmul GFLOP/s; a larger model (`transformer_model.MEDIUM`)
against PyTorch eager, without a target; the cold compile time of the step (a fresh
interpreter and cache directory, gcc included); the bytes the context's buffers hold
against the static state (params, grads, Adam moments, the data set) plus the largest set
of intermediates live at once by liveness. The first losses must match
PyTorch (<= 1e-4 relative) before any time counts.

Run: `.venv/bin/python benchmarks/bench_transformer.py [--quick]` (or benchmarks/run_all.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_matmul
import transformer_model as tm
from common import Row, Stat, WorkerTimeout, measure_all, print_table, ratio_row, run_worker

import ocannl_ast as oc

LOSS_RTOL = 1e-4
CHECK_STEPS = 3
COMPILE_TARGET_S = 2.0
JAX_TARGET = 0.8  #: ocannl / jax.jit, 1 thread
COLD_REPEATS = 3  #: runs of the target row's cold compile (each in a fresh cache)
G = "transformer"
T = TypeVar("T")


def with_threads(threads: int, fn: Callable[[], T]) -> T:
    """Compile with `OCANNL_AST_THREADS` set (read when the routine is rendered)."""
    saved = os.environ.get("OCANNL_AST_THREADS")
    os.environ["OCANNL_AST_THREADS"] = str(threads)
    try:
        return fn()
    finally:
        if saved is None:
            del os.environ["OCANNL_AST_THREADS"]
        else:
            os.environ["OCANNL_AST_THREADS"] = saved


def ours(cfg: tm.Config, threads: int, weights: dict[str, np.ndarray] | None = None
         ) -> tuple[Callable[[int], float], oc.Context, dict[str, np.ndarray]]:
    ids, tgt = tm.data(cfg)
    ctx = oc.Context()
    routine, loss, ws = with_threads(threads, lambda: tm.build_ocannl(cfg, ids, tgt, ctx, weights))
    n = cfg.n_batches

    def step(i: int) -> float:
        routine(batch=i % n)
        return 0.0

    step.loss = lambda: float(ctx.get(loss)[0])  # type: ignore[attr-defined]
    step.routine = routine  # type: ignore[attr-defined]
    step.params = loss.params()  # type: ignore[attr-defined]
    return step, ctx, ws


def check_losses(cfg: tm.Config, a: Callable[[int], float], b: Callable[[int], float],
                 what: str) -> float:
    worst = 0.0
    for i in range(CHECK_STEPS):
        a(i)
        la, lb = a.loss(), b(i)  # type: ignore[attr-defined]
        worst = max(worst, abs(la - lb) / abs(lb))
    if not worst <= LOSS_RTOL:
        raise RuntimeError(f"transformer benchmark: the first losses of {what} differ from "
                           f"ocannl_ast's by {worst:.3g} relative (> {LOSS_RTOL:g})")
    return worst


def compiled_torch(cfg: tm.Config, ws: dict[str, np.ndarray]) -> Callable[[int], float] | str:
    """The PyTorch step with its loss under `torch.compile`, or why that is unavailable."""
    import torch

    try:
        step = tm.torch_step(cfg, *tm.data(cfg), ws)
        fast = torch.compile(step.loss_of)  # type: ignore[attr-defined]
        opt = torch.optim.AdamW(step.params.values(), lr=cfg.lr,  # type: ignore[attr-defined]
                                weight_decay=cfg.weight_decay, eps=1e-8)

        def run(i: int) -> float:
            opt.zero_grad(set_to_none=False)
            loss = fast(i)
            loss.backward()
            opt.step()
            return float(loss.detach())

        run(0)  # compiles; the check below restarts from fresh weights
    except Exception as e:  # noqa: BLE001 -- any failure of the toolchain skips the row
        return f"skipped: torch.compile failed ({type(e).__name__}: {str(e)[:80]})"
    with torch.no_grad():
        for k, p in step.params.items():  # type: ignore[attr-defined]
            p.copy_(torch.from_numpy(ws[k]))
    opt.state.clear()
    return run


def run(quick: bool = False) -> list[Row]:
    try:
        import torch
    except ImportError:
        return [Row(G, "torch eager / ocannl step", "skipped: torch not installed", "<= 0.5x")]
    cfg = tm.QUICK if quick else tm.Config()
    rounds, round_s = (3, 0.01) if quick else (9, 0.25)
    saved_threads = torch.get_num_threads()
    rows: list[Row] = []
    try:
        torch.set_num_threads(1)
        oc1, ctx1, ws = ours(cfg, 1)
        te = tm.torch_step(cfg, *tm.data(cfg), ws)
        worst = check_losses(cfg, oc1, te, "torch eager")
        rows.append(Row(G, f"first {CHECK_STEPS} losses vs torch (max rel. diff)",
                        f"{worst:.2g}", f"<= {LOSS_RTOL:g}", True))
        t1 = measure_all({"ocannl": oc1, "torch": te}, rounds=rounds, round_s=round_s)
        rows += pair_rows("1 thread", t1, 0.5)
        rows += gflops_rows(cfg, t1["ocannl"].median, quick)
        rows += compile_rows(quick)
        rows += memory_rows(ctx1, oc1.params)  # type: ignore[attr-defined]
        tc = ("skipped in --quick (torch.compile takes tens of seconds)" if quick
              else compiled_torch(cfg, ws))
        if isinstance(tc, str):
            rows.append(Row(G, "ocannl / torch.compile, 1 thread", tc, "<= 0.8x"))
        else:
            oc1b, _, _ = ours(cfg, 1, ws)
            check_losses(cfg, oc1b, tc, "torch.compile")
            tcs = measure_all({"ocannl": oc1b, "torch.compile": tc}, rounds=rounds,
                              round_s=round_s)
            rows.append(Row(G, "torch.compile step, 1 thread", tcs["torch.compile"].show("ms")))
            rows.append(ratio_row(G, "ocannl / torch.compile, 1 thread", tcs["ocannl"].median
                                  / tcs["torch.compile"].median, at_most=0.8))
        rows += jax_rows(quick)
        torch.set_num_threads(2)
        oc2, _, _ = ours(cfg, 2, ws)
        te2 = tm.torch_step(cfg, *tm.data(cfg), ws)
        check_losses(cfg, oc2, te2, "torch eager, 2 threads")
        t2 = measure_all({"ocannl": oc2, "torch": te2}, rounds=rounds, round_s=round_s)
        rows += pair_rows("2 threads", t2, 0.6)
        rows += sync_rows(oc2.routine)  # type: ignore[attr-defined]
        if not quick:
            torch.set_num_threads(1)
            rows += medium_rows()
    finally:
        torch.set_num_threads(saved_threads)
    rows.append(Row(G, "load average (1, 5, 15 min)",
                    " ".join(f"{x:.2f}" for x in os.getloadavg())))
    return rows


def jax_rows(quick: bool) -> list[Row]:
    """ocannl's step against the model's `jax.jit` step (transformer_jax.py), both in one
    fresh interpreter confined to one CPU (XLA's client runs threads of its own besides
    its one-thread flags), rounds interleaved; the first losses checked first."""
    what, target = "ocannl / jax.jit, 1 thread", f"<= {JAX_TARGET:g}x"
    if importlib.util.find_spec("jax") is None:
        return [Row(G, what, "skipped: jax is not installed (scripts/setup.sh installs it "
                             "where it can)", target)]
    try:
        got = run_worker(Path(__file__), ["--jax-worker"] + (["--quick"] if quick else []),
                         timeout=600)
    except (WorkerTimeout, RuntimeError) as e:
        return [Row(G, what, f"failed: {str(e).strip().splitlines()[-1][:160]}", target, False)]
    ours_t, jax_t = Stat(*got["ocannl"]), Stat(*got["jax"])
    return [Row(G, f"first {CHECK_STEPS} losses vs jax.jit (max rel. diff)",
                f"{got['worst']:.2g}", f"<= {LOSS_RTOL:g}", True),
            Row(G, "jax.jit step, 1 CPU (ocannl in the same process: "
                   f"{ours_t.show('ms')})", jax_t.show("ms")),
            ratio_row(G, what, ours_t.median / jax_t.median, at_most=JAX_TARGET)]


def jax_worker(quick: bool) -> None:
    """`jax_rows`' measurement, in this fresh interpreter: pinned to the CPU it runs on."""
    import transformer_jax as tj

    try:
        with open("/proc/self/stat") as f:  # field 39: the CPU this process last ran on
            cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, IndexError, ValueError):
        cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    tj.use_one_thread()
    cfg = tm.QUICK if quick else tm.Config()
    rounds, round_s = (3, 0.01) if quick else (9, 0.25)
    oc1, _, ws = ours(cfg, 1)
    js = tj.jax_step(cfg, *tm.data(cfg), ws)
    worst = check_losses(cfg, oc1, js, "jax.jit")
    t = measure_all({"ocannl": oc1, "jax": js}, rounds=rounds, round_s=round_s)
    print(json.dumps({"worst": worst, **{k: [v.median, v.lo, v.hi] for k, v in t.items()}}))


def pair_rows(label: str, t: dict[str, Stat], target: float) -> list[Row]:
    return [Row(G, f"ocannl_ast step, {label}", t["ocannl"].show("ms")),
            Row(G, f"torch eager step, {label}", t["torch"].show("ms")),
            ratio_row(G, f"ocannl / torch eager, {label}",
                      t["ocannl"].median / t["torch"].median, at_most=target)]


def medium_rows() -> list[Row]:
    """The larger model (`tm.MEDIUM`, about 20 GFLOP a step) against torch eager at 1
    thread, from the same weights: no target, a check that the lead holds where the matrix
    products dominate (the caller set torch's threads)."""
    cfg, group = tm.MEDIUM, f"{G} medium (d {tm.MEDIUM.d_model}, context {tm.MEDIUM.context})"
    ocm, _, ws = ours(cfg, 1)
    te = tm.torch_step(cfg, *tm.data(cfg), ws)
    worst = check_losses(cfg, ocm, te, "torch eager (medium)")
    t = measure_all({"ocannl": ocm, "torch": te}, rounds=5, round_s=0.5)
    got = tm.flops_per_step(cfg) / t["ocannl"].median / 1e9
    return [Row(group, f"first {CHECK_STEPS} losses vs torch (max rel. diff, checked)",
                f"{worst:.2g}"),
            Row(group, "ocannl_ast step, 1 thread", t["ocannl"].show("ms")),
            Row(group, "torch eager step, 1 thread", t["torch"].show("ms")),
            ratio_row(group, "ocannl / torch eager, 1 thread",
                      t["ocannl"].median / t["torch"].median),
            Row(group, "ocannl achieved GFLOP/s (model FLOPs), 1 thread", f"{got:.3g}")]


def sync_rows(routine: oc.Routine) -> list[Row]:
    """How the threaded step synchronizes, read from its generated C (the contraction
    kernel's own definitions left out): parallel regions it enters per call (the entry
    point's, plus each loop or kernel call forking its own) and the worksharing loops and
    barriers of the team in it (each ends in, or is, a barrier; a kernel call made by the
    team shares its tiles with one worksharing loop)."""
    src = getattr(routine.compiled, "source_path", None)
    if src is None:
        return []
    paths = [Path(src), *sorted(Path(src).parent.glob(Path(src).stem + ".u*.c"))]
    text = "\n".join(re.sub(r"/\* ---- contraction kernel.*?#undef OCK_T", "", p.read_text(),
                            flags=re.DOTALL) for p in paths)
    forks = text.count("#pragma omp parallel") + len(re.findall(r", [2-9]\d*, ocannl_mmd", text))
    syncs = (text.count("#pragma omp for") + text.count("#pragma omp barrier")
             + len(re.findall(r", -\d+, ocannl_mmd", text)))
    return [Row(G, "2-thread step: parallel regions entered per call", str(forks)),
            Row(G, "2-thread step: team barriers per call (worksharing loops, kernel calls, "
                   "barriers)", str(syncs))]


def gflops_rows(cfg: tm.Config, step_s: float, quick: bool) -> list[Row]:
    n, mm_gflops = bench_matmul.matmul_gflops(quick)
    got = tm.flops_per_step(cfg) / step_s / 1e9
    return [Row(G, "ocannl achieved GFLOP/s (model FLOPs), 1 thread", f"{got:.3g}"),
            Row(G, f"ocannl matmul n={n} GFLOP/s, 1 thread", f"{mm_gflops:.3g}"),
            ratio_row(G, "achieved / matmul GFLOP/s (aim >= 0.5)", got / mm_gflops)]


def compile_rows(quick: bool) -> list[Row]:
    """The step compiled in a fresh interpreter with an empty compile and rewrite cache
    (`OCANNL_AST_CACHE`): as the C backend builds it (a large routine's translation units
    compiled at once), then as one translation unit (`OCANNL_AST_CC_JOBS=1`) for
    comparison, both on an installed package: what `scripts/setup.sh` builds once per
    installation is there (`python -m ocannl_ast.prebuilt`, run here first: nothing when
    it is built; the contraction kernel's objects and the library's own @op/@cd functions
    rewritten), this model and its step are not. Then with nothing prebuilt either
    (`OCANNL_AST_PREBUILT=off`: the kernel objects compiled and the library rewritten
    too). The first row is the median of `COLD_REPEATS` runs (min and max shown), the
    others one run each; each shows the load average at its start (median)."""
    what = "cold compile of the step (fresh cache, gcc included)"
    target = f"<= {COMPILE_TARGET_S:g} s"
    subprocess.run([sys.executable, "-m", "ocannl_ast.prebuilt"], check=False,
                   stdout=subprocess.DEVNULL, timeout=600)
    rows = []
    bare = ", nothing prebuilt (OCANNL_AST_PREBUILT=off: kernel objects, library rewrites)"
    for label, jobs, prebuilt in (("", None, True), (", one translation unit", "1", True),
                                  (bare, None, False)):
        try:  # the target row: the median of COLD_REPEATS runs (each its own fresh cache)
            runs = [cold_compile(quick, jobs, prebuilt)
                    for _ in range(1 if quick or label else COLD_REPEATS)]
        except WorkerTimeout as e:
            rows.append(Row(G, what + label, str(e), target if not label else "", False))
            continue
        got = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
        secs = [r["seconds"] for r in runs]
        spread = f" (min {min(secs):.3g}, max {max(secs):.3g}, {len(secs)} runs)" \
            if len(secs) > 1 else ""
        rows.append(Row(G, what + label, f"{got['seconds']:.3g} s{spread} ({got['units']:.0f} "
                                         f"C file(s), {got['lines']:.0f} lines, "
                                         f"{got['shared']:.0f} shared nest functions; "
                                         f"CPU: python {got['python_cpu']:.2g} s, gcc "
                                         f"{got['gcc_cpu']:.2g} s; load {got['load']:.2g})",
                        "" if label else target,
                        None if label else got["seconds"] <= COMPILE_TARGET_S))
    return rows


def cold_compile(quick: bool, jobs: str | None, prebuilt: bool = True) -> dict[str, float]:
    names = ("OCANNL_AST_CACHE", "OCANNL_AST_CC_JOBS", "OCANNL_AST_PREBUILT",
             "OCANNL_AST_OBJECT_CACHE", "OCANNL_AST_REWRITE_CACHE")
    saved = {k: os.environ.get(k) for k in names}
    with tempfile.TemporaryDirectory(prefix="ocannl_bench_cold_") as cache:
        for k in names[1:]:
            os.environ.pop(k, None)
        os.environ["OCANNL_AST_CACHE"] = cache
        if jobs is not None:
            os.environ["OCANNL_AST_CC_JOBS"] = jobs
        if not prebuilt:
            os.environ["OCANNL_AST_PREBUILT"] = "off"
        try:
            load = os.getloadavg()[0]
            got: dict[str, float] = run_worker(
                Path(__file__), ["--compile-worker"] + (["--quick"] if quick else []),
                timeout=120)
            return {**got, "load": load}
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def compile_worker(quick: bool) -> None:
    cfg = tm.QUICK if quick else tm.Config()
    ids, tgt = tm.data(cfg)
    t0, c0 = time.perf_counter(), os.times()
    tm.build_ocannl(cfg, ids, tgt, oc.Context())
    seconds, c1 = time.perf_counter() - t0, os.times()
    files = [p for p in Path(os.environ["OCANNL_AST_CACHE"]).glob("routine*.c")]
    text = "\n".join(p.read_text() for p in files)
    shared = len(set(re.findall(r"\b\w+_n\d+(?=\()", text)))  # c_dedup's functions
    print(json.dumps({"seconds": seconds, "units": len(files), "lines": text.count("\n"),
                      "shared": shared,
                      "python_cpu": c1.user - c0.user + c1.system - c0.system,
                      "gcc_cpu": c1.children_user - c0.children_user
                      + c1.children_system - c0.children_system}))


def memory_rows(ctx: oc.Context, params: list[oc.Tensor]) -> list[Row]:
    """Bytes of every array the context holds against the issue's bound: the static state
    (params, grads, Adam moments; the resident data set once) plus the most intermediate
    bytes live at once by a liveness analysis of the step's assignments, independent of
    what the compiler inlines or how it shares storage (`Context.memory_report`)."""
    rep = ctx.memory_report()
    params_b = sum(ctx.get(p).nbytes for p in params)
    mb = 1e6
    return [Row(G, "bytes held by the context's buffers",
                f"{rep.allocated_bytes / mb:.3g} MB in {rep.buffers} buffers"),
            Row(G, "static state: params, grads, Adam m and v (params alone)",
                f"{rep.static_bytes / mb:.3g} MB ({params_b / mb:.3g} MB)"),
            Row(G, "static state: the resident data set (counted once)",
                f"{(rep.state_bytes - rep.static_bytes) / mb:.3g} MB"),
            Row(G, "largest set of intermediates live at once (liveness of the step)",
                f"{rep.live_peak_bytes / mb:.3g} MB"),
            ratio_row(G, "held / (static state + live intermediates)", rep.ratio,
                      at_most=2.0)]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="tiny sizes, few rounds")
    ap.add_argument("--compile-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--jax-worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compile_worker:
        compile_worker(args.quick)
    elif args.jax_worker:
        jax_worker(args.quick)
    else:
        print_table(run(args.quick))
