"""Shared pieces of the benchmark suite: timing (median of rounds, min-max), result rows,
BLAS thread control, and building a hand-written C file exactly as the C backend builds its
generated code (same gcc, same flags, loaded with cffi in ABI mode, called the same way).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cffi
import numpy as np

ROOT = Path(__file__).resolve().parents[1]


# ---- timing ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """Seconds per call: the median over rounds, and the fastest and slowest round."""

    median: float
    lo: float
    hi: float

    def show(self, unit: str = "auto") -> str:
        return f"{fmt_time(self.median, unit)} [{fmt_time(self.lo, unit)}-{fmt_time(self.hi, unit)}]"


def fmt_time(sec: float, unit: str = "auto") -> str:
    if unit == "auto":
        unit = "s" if sec >= 1 else "ms" if sec >= 1e-3 else "us"
    scale = {"s": 1.0, "ms": 1e3, "us": 1e6}[unit]
    return f"{sec * scale:.3g} {unit}"


def calibrate(fn: Callable[[int], Any], round_s: float) -> int:
    """Calls per round so that a round of `fn(i)` lasts about `round_s` (also warms up)."""
    calls, t = 1, 0.0
    while True:
        t0 = time.perf_counter()
        for i in range(calls):
            fn(i)
        t = time.perf_counter() - t0
        if t >= round_s / 4 or calls >= 1 << 20:
            break
        calls *= 4
    return max(1, math.ceil(calls * round_s / max(t, 1e-9)))


def measure_all(fns: dict[str, Callable[[int], Any]], *, rounds: int = 7,
                round_s: float = 0.2) -> dict[str, Stat]:
    """Seconds per call of each `fn(i)` (i = the call number), rounds interleaved across
    the functions so that load changes on a shared machine hit all of them alike."""
    calls = {name: calibrate(fn, round_s) for name, fn in fns.items()}
    per_call: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            n = calls[name]
            t0 = time.perf_counter()
            for i in range(n):
                fn(i)
            per_call[name].append((time.perf_counter() - t0) / n)
    return {name: stat_of(v) for name, v in per_call.items()}


def measure(fn: Callable[[int], Any], *, rounds: int = 7, round_s: float = 0.2) -> Stat:
    return measure_all({"": fn}, rounds=rounds, round_s=round_s)[""]


def stat_of(samples: Sequence[float]) -> Stat:
    return Stat(float(np.median(samples)), float(min(samples)), float(max(samples)))


# ---- result rows ----------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One line of the results table. `met` is None for rows without a target."""

    group: str
    figure: str
    measured: str
    target: str = ""
    met: bool | None = None

    def status(self) -> str:
        return "-" if self.met is None else "met" if self.met else "NOT MET"


def ratio_row(group: str, figure: str, ratio: float, *, at_most: float | None = None,
              at_least: float | None = None, note: str = "") -> Row:
    """A ratio with its target: `at_most` (slowdown bound) or `at_least` (speed bound)."""
    measured = f"{ratio:.3g}x" + (f"  ({note})" if note else "")
    if at_most is not None:
        return Row(group, figure, measured, f"<= {at_most:g}x", ratio <= at_most)
    if at_least is not None:
        return Row(group, figure, measured, f">= {at_least:g}x", ratio >= at_least)
    return Row(group, figure, measured)


def print_table(rows: Sequence[Row], out: Any = None) -> None:
    out = out or sys.stdout
    head = ("figure", "measured", "target", "status")
    cells = [(f"[{r.group}] {r.figure}", r.measured, r.target, r.status()) for r in rows]
    widths = [max(len(c[k]) for c in [head, *cells]) for k in range(4)]
    line = " | ".join(h.ljust(w) for h, w in zip(head, widths))
    print(line, file=out)
    print("-+-".join("-" * w for w in widths), file=out)
    for c in cells:
        print(" | ".join(x.ljust(w) for x, w in zip(c, widths)), file=out)


# ---- BLAS threads ---------------------------------------------------------------------

BLAS_ENV_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                 "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")


def have_threadpoolctl() -> bool:
    try:
        import threadpoolctl  # noqa: F401
    except ImportError:
        return False
    return True


def thread_control_method() -> str:
    if have_threadpoolctl():
        return "threadpoolctl, in process"
    return "*_NUM_THREADS env vars, subprocess (no threadpoolctl)"


@contextlib.contextmanager
def blas_threads(n: int) -> Iterator[None]:
    """Limit BLAS to `n` threads in this process when threadpoolctl is installed; without it
    this does nothing (callers that need a limit then use `run_worker` with `worker_env`)."""
    if not have_threadpoolctl():
        yield
        return
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=n):
        yield


def worker_env(threads: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update({k: str(threads) for k in BLAS_ENV_VARS})
    return env


class WorkerTimeout(Exception):
    """A worker ran past its time limit (it and its children were killed)."""


def run_worker(script: Path, args: Sequence[str], *, threads: int | None = None,
               timeout: float | None = None) -> Any:
    """Run `python script args...` (a fresh interpreter), parse the JSON of its last line.
    Past `timeout` seconds the worker's whole process group (gcc included) is killed and
    WorkerTimeout raised."""
    env = worker_env(threads) if threads is not None else dict(os.environ)
    env.pop("OCANNL_AST_CHECK", None)  # verification would distort the timings
    proc = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise WorkerTimeout(f"{script.name} {' '.join(args)}: over {timeout} s") from None
    if proc.returncode != 0:
        raise RuntimeError(f"benchmark worker {script.name} {' '.join(args)} failed "
                           f"(exit {proc.returncode}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


# ---- hand-written C, built like generated code ------------------------------------------


def gcc_command(c_path: Path, so_path: Path) -> list[str]:
    """The command the C backend runs: its optimization flags (or $OCANNL_AST_CFLAGS) and
    its required flags."""
    from ocannl_ast.backends import compiler  # lazily: NumPy-only workers skip the import

    flags = compiler.effective_flags(compiler.DEFAULT_OPT_FLAGS)
    return [compiler.CC, *flags, "-o", str(so_path), str(c_path), "-lm"]


def gcc_build(source: str, directory: Path, stem: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    c_path, so_path = directory / f"{stem}.c", directory / f"{stem}.so"
    c_path.write_text(source)
    proc = subprocess.run(gcc_command(c_path, so_path), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"gcc failed on {c_path}:\n{proc.stderr[-3000:]}")
    return so_path


class HandRoutine:
    """A hand-written C function `int name(float* restrict ..., int64_t ...)` over NumPy
    arrays, called as the backend's CompiledRoutine calls generated code: cffi ABI mode,
    `ffi.from_buffer` pointers exported once and reused while the arrays are the same."""

    def __init__(self, source: str, name: str, n_arrays: int, n_static: int,
                 directory: Path | None = None) -> None:
        directory = directory or Path(tempfile.mkdtemp(prefix="ocannl_bench_"))
        so_path = gcc_build(source, directory, name)
        self.ffi = cffi.FFI()
        self.ffi.cdef(f"int {name}({', '.join(['float *'] * n_arrays + ['int64_t'] * n_static)});")
        self._lib = self.ffi.dlopen(str(so_path))
        self._fn = getattr(self._lib, name)
        self._n = (n_arrays, n_static)
        self._last_seq: object = None
        self._ptrs: tuple[Any, ...] = ()

    def __call__(self, arrays: Sequence[np.ndarray], static_args: Sequence[int] = ()) -> None:
        if len(arrays) != self._n[0] or len(static_args) != self._n[1]:
            raise RuntimeError("wrong number of arguments")
        if arrays is not self._last_seq:
            self._ptrs = self._export(arrays)
        self._last_seq = arrays
        code = self._fn(*self._ptrs, *static_args)
        if code != 0:
            raise RuntimeError(f"hand-written routine failed with code {code}")

    def bare(self, arrays: Sequence[np.ndarray]) -> Callable[..., int]:
        """The C function over these arrays' pointers, called with the static arguments
        only: no Python between the caller and cffi (for comparing C codes alone)."""
        fn, ptrs = self._fn, self._export(arrays)
        return lambda *static_args: fn(*ptrs, *static_args)

    def _export(self, arrays: Sequence[np.ndarray]) -> tuple[Any, ...]:
        for a in arrays:
            assert a.dtype == np.float32 and a.flags.c_contiguous
        return tuple(self.ffi.from_buffer("float[]", a) for a in arrays)
