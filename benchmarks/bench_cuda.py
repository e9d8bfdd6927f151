"""GPU mode: the moons training step and float32 matmul (n = 1024, 4096) on the CUDA backend
against the C backend and PyTorch CUDA (when installed), and the matmul without shared-memory
tiles (``OCANNL_AST_CUDA_GEMM=0``), also without the register tiling of reductions
(``OCANNL_AST_CUDA_TILE=0``), ratios measured in one run; the
moons step and the transformer LM step (benchmarks/transformer_model.py) with CUDA graph
replay against direct launches (``OCANNL_AST_CUDA_GRAPHS=0`` when compiled), the transformer
also against PyTorch CUDA eager; and the cold NVRTC compile of the transformer step as one
program and as several compiled at once (`--nvrtc`: only that, which needs no GPU);
`--medium`: only the transformer step of the larger model (`transformer_model.MEDIUM`).

Without a GPU (or cuda-python) the CUDA figures are reported as skipped with the reason and
only the C backend's times are measured. Times include a stream synchronization per call.

Run: `.venv/bin/python benchmarks/bench_cuda.py [--quick] [--nvrtc | --transformer | --medium]` (or
benchmarks/run_all.py); ``OCANNL_AST_NVRTC_FLAGS`` applies to the routines it compiles.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


@contextmanager
def graphs(on: bool) -> Iterator[None]:
    """Routines compiled inside replay CUDA graphs (`on`) or launch directly."""
    saved = os.environ.get("OCANNL_AST_CUDA_GRAPHS")
    os.environ["OCANNL_AST_CUDA_GRAPHS"] = "1" if on else "0"
    try:
        yield
    finally:
        if saved is None:
            del os.environ["OCANNL_AST_CUDA_GRAPHS"]
        else:
            os.environ["OCANNL_AST_CUDA_GRAPHS"] = saved


@contextmanager
def tiling(mode: str, gemm: str = "0") -> Iterator[None]:
    """Routines compiled inside use ``OCANNL_AST_CUDA_TILE=mode`` (`cuda_tile`) and
    ``OCANNL_AST_CUDA_GEMM=gemm`` (`cuda_gemm`: contractions through shared memory)."""
    names = {"OCANNL_AST_CUDA_TILE": mode, "OCANNL_AST_CUDA_GEMM": gemm}
    saved = {k: os.environ.get(k) for k in names}
    os.environ.update(names)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                del os.environ[k]
            else:
                os.environ[k] = v


def moons_fn(backend: str, batch: int, use_graphs: bool = True) -> Callable[[int], None]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "backends"))
    import cuda_cases

    case = cuda_cases.moons_step(n=batch * 8, batch=batch)
    ctx = oc.Context(backend=backend)
    with graphs(use_graphs):
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


def transformer_fns(quick: bool, medium: bool = False) -> dict[str, Callable[[int], None]]:
    """The transformer LM step on CUDA with graphs, without, and in PyTorch CUDA eager (when
    installed), from the same weights; their first losses checked against each other."""
    import transformer_model as tm

    cfg = tm.QUICK if quick else tm.MEDIUM if medium else tm.Config()
    ids, tgt = tm.data(cfg)
    fns: dict[str, Callable[[int], None]] = {}
    losses: dict[str, float] = {}
    weights = None
    for name, on in (("cuda graphs", True), ("cuda direct", False)):
        ctx = oc.Context(backend="cuda")
        with graphs(on):
            step, loss, weights = tm.build_ocannl(cfg, ids, tgt, ctx, weights)
        step(batch=0)
        losses[name] = float(ctx.get(loss).reshape(-1)[0])
        fns[name] = lambda i, s=step: (s(batch=i % cfg.n_batches), _sync())[0]
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available() and weights is not None:
        ts = tm.torch_step(cfg, ids, tgt, weights, device="cuda")
        losses["torch cuda"] = ts(0)
        fns["torch cuda"] = lambda i: (ts(i), torch.cuda.synchronize())[0]
    first = losses["cuda graphs"]
    for name, v in losses.items():
        assert abs(v - first) <= 1e-4 * max(1.0, abs(first)), (name, v, first)
    return fns


def nvrtc_rows(quick: bool) -> list[Row]:
    """Cold NVRTC compile (a fresh cache) of the transformer step's CUDA source for the
    device's architecture (sm_90 without one): one program, and `nvrtc_jobs()` at once."""
    import transformer_model as tm

    from ocannl_ast.backends import cuda_nvrtc

    group = "cuda nvrtc transformer step"
    try:
        cuda_nvrtc.nvrtc_version()
    except oc.BackendError as e:
        return [Row(group, "nvrtc compile", f"skipped: {str(e).splitlines()[0][:60]}")]
    plan = _transformer_plan(tm.QUICK if quick else tm.Config())
    try:
        from ocannl_ast.backends.cuda_runtime import device_arch

        arch = device_arch()
    except oc.BackendError:
        arch = "sm_90"
    rows = [Row(group, "kernels / source", f"{len(plan.kernels)} / {len(plan.source) >> 10} KiB")]
    many = cuda_nvrtc.part_count(len(plan.kernels), cuda_nvrtc.nvrtc_jobs())
    for parts, flags in ((1, ""), (many, ""), (many, "--Ofast-compile=min")):
        saved = os.environ.get("OCANNL_AST_NVRTC_FLAGS")
        os.environ["OCANNL_AST_NVRTC_FLAGS"] = flags
        try:
            with tempfile.TemporaryDirectory() as tmp:
                srcs = [src for src, _ in plan.part_sources(parts)]
                t0 = time.perf_counter()
                cuda_nvrtc.compile_parts(plan.cname, srcs, arch, lambda n, s, a, d=Path(tmp):
                                         cuda_nvrtc.compile_ptx(n, s, a, d))
                shown = f"{time.perf_counter() - t0:.2f} s"
        except oc.BackendError as e:  # an NVRTC without that flag
            shown = f"skipped: {str(e).splitlines()[-1][:60]}"
        finally:
            if saved is None:
                del os.environ["OCANNL_AST_NVRTC_FLAGS"]
            else:
                os.environ["OCANNL_AST_NVRTC_FLAGS"] = saved
        rows.append(Row(group, f"cold compile for {arch}, {len(srcs)} program(s) {flags}",
                        shown))
    return rows


def _transformer_plan(cfg: Any) -> Any:
    """The CUDA plan of the transformer step (rendering only: no GPU needed)."""
    import transformer_model as tm

    from ocannl_ast.backends import CudaBackend, register_backend, unregister_backend
    from ocannl_ast.backends.cuda_backend import plan_cuda

    plans: list[Any] = []

    class Keep(CudaBackend):
        def render(self, prog: Any) -> str:
            plans.append(plan_cuda(prog, self.syntax))
            return plans[-1].source

    ids, tgt = tm.data(cfg)
    onehot = np.eye(cfg.vocab, dtype=np.float32)[tgt]
    bi = oc.static_index("batch")
    loss, _ = tm.ocannl_loss(cfg, oc.ndarray(ids, batch_axes=2).batch_slice(bi),
                             oc.ndarray(onehot, batch_axes=2).batch_slice(bi))
    code = [oc.grad_update(loss),
            oc.adam_update(loss, learning_rate=cfg.lr, weight_decay=cfg.weight_decay)]
    register_backend("cuda_plan_probe", Keep, replace=True)
    try:
        oc.render(code, backend="cuda_plan_probe")
    finally:
        unregister_backend("cuda_plan_probe")
    return plans[-1]


def _rows(group: str, fns: dict[str, Callable[[int], None]], rounds: int) -> list[Row]:
    times = measure_all(fns, rounds=rounds, round_s=0.1)
    rows = [Row(group, f"{name} time per call", times[name].show()) for name in fns]
    if "cuda" in times and "c" in times:
        rows.append(ratio_row(group, "speed-up of cuda over c",
                              times["c"].median / times["cuda"].median))
    if "cuda register tiles" in times and "cuda untiled" in times:
        rows.append(ratio_row(group, "speed-up of register tiling (OCANNL_AST_CUDA_TILE)",
                              times["cuda untiled"].median / times["cuda register tiles"].median))
        rows.append(ratio_row(group, "speed-up of shared-memory tiles (OCANNL_AST_CUDA_GEMM) "
                                     "over register tiles",
                              times["cuda register tiles"].median / times["cuda"].median))
    if "cuda" in times and "torch cuda" in times:
        rows.append(ratio_row(group, "cuda time / torch cuda time",
                              times["cuda"].median / times["torch cuda"].median))
    if "cuda graphs" in times and "cuda direct" in times:
        rows.append(ratio_row(group, "speed-up of graph replay over direct launches",
                              times["cuda direct"].median / times["cuda graphs"].median))
    if "cuda graphs" in times and "torch cuda" in times:
        rows.append(ratio_row(group, "cuda time / torch cuda time",
                              times["cuda graphs"].median / times["torch cuda"].median))
    return rows


def transformer_rows(quick: bool, medium: bool = False) -> list[Row]:
    missing = cuda_missing()
    group = "cuda transformer step" + (" (medium: d 256, context 128)" if medium else "")
    if missing is not None:
        return [Row(group, "cuda step", f"skipped: {missing}")]
    flags = os.environ.get("OCANNL_AST_NVRTC_FLAGS", "")
    return _rows(group + (f" ({flags})" if flags else ""), transformer_fns(quick, medium),
                 3 if quick else 7)


def run(quick: bool) -> list[Row]:
    missing = cuda_missing()
    rounds = 3 if quick else 7
    rows: list[Row] = []
    for batch in (16,) if quick else (32, 1024):
        group = f"cuda moons B={batch}"
        fns = {"c": moons_fn("c", batch)}
        if missing is None:
            fns["cuda"] = moons_fn("cuda", batch)
            fns["cuda direct"] = moons_fn("cuda", batch, use_graphs=False)
        rows += _rows(group, fns, rounds)
        if missing is None:
            rows.append(ratio_row(group, "speed-up of graph replay over direct launches",
                                  _ratio(rows, group)))
        if missing is not None:
            rows.append(Row(group, "cuda step", f"skipped: {missing}"))
    for n in QUICK_SIZES if quick else FULL_SIZES:
        group = f"cuda matmul n={n}"
        fns = {"c": matmul_fn("c", n)} if n <= C_MAX else {}
        if missing is None:
            fns["cuda"] = matmul_fn("cuda", n)
            with tiling("1"):
                fns["cuda register tiles"] = matmul_fn("cuda", n)
            with tiling("0"):
                fns["cuda untiled"] = matmul_fn("cuda", n)
            tm = torch_matmul(n)
            if tm is not None:
                fns["torch cuda"] = tm
        if fns:
            rows += _rows(group, fns, rounds)
        if missing is not None:
            rows.append(Row(group, "cuda matmul", f"skipped: {missing}"))
    return rows + transformer_rows(quick)


def _ratio(rows: list[Row], group: str) -> float:
    """direct / graphs, from the time rows of `group` (their medians)."""
    t = {r.figure.removesuffix(" time per call"): _seconds(r.measured)
         for r in rows if r.group == group and r.figure.endswith(" time per call")}
    return t["cuda direct"] / t["cuda"]


def _seconds(shown: str) -> float:
    value, unit = shown.split(" [")[0].split()
    return float(value) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[unit]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--nvrtc", action="store_true", help="only the NVRTC compile times")
    ap.add_argument("--transformer", action="store_true", help="only the transformer step")
    ap.add_argument("--medium", action="store_true",
                    help="only the transformer step, the larger model (transformer_model.MEDIUM)")
    args = ap.parse_args()
    rows = (nvrtc_rows(args.quick) if args.nvrtc else transformer_rows(args.quick)
            if args.transformer else transformer_rows(False, True) if args.medium
            else run(args.quick))
    print_table(rows)


if __name__ == "__main__":
    main()
