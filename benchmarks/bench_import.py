"""`import ocannl_ast` time in a fresh interpreter (median of several), with `import numpy`
alone for reference (ocannl_ast imports it), and with the rewrite cache off for comparison.
The library's own @op/@cd functions are built at their first call, not at import: the time
to build all of them after import (read from a warm rewrite cache, or rewritten with libcst
when the cache is off) is shown too, as the most that first calls can add.

As users import it: with Python's bytecode cache (`__pycache__`) in place, which any
earlier import writes by default. A machine with PYTHONDONTWRITEBYTECODE set never writes
it and recompiles every module of the package on each import (about +90 ms here), so the
warm-up import runs without that variable.

Run: `.venv/bin/python benchmarks/bench_import.py [--quick]` (or benchmarks/run_all.py).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Row, Stat, print_table, stat_of

TARGET_S = 0.25
REPEATS, QUICK_REPEATS = 9, 3
_SNIPPET = ("import json, time; t = time.perf_counter(); import {mod}; "
            "print(json.dumps(time.perf_counter() - t))")


def _env(**extra: str) -> dict[str, str]:
    import os

    env = dict(os.environ)
    env.pop("OCANNL_AST_CHECK", None)
    return {**env, **extra}


def _once(module: str, env: dict[str, str]) -> float:
    import subprocess

    out = subprocess.run([sys.executable, "-c", _SNIPPET.format(mod=module)],
                         capture_output=True, text=True, check=True, env=env)
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def import_time(module: str, repeats: int, **env: str) -> Stat:
    """Seconds for `import module` (interpreter start-up excluded), fresh process each time."""
    return stat_of([_once(module, _env(**env)) for _ in range(repeats)])


def warm_and_cold(repeats: int) -> tuple[Stat, Stat]:
    """`import ocannl_ast` with a warm rewrite cache and with it off, samples interleaved
    (so that a change in machine load hits both alike)."""
    warm_env, cold_env = _env(), _env(OCANNL_AST_REWRITE_CACHE="off")
    writing = {k: v for k, v in warm_env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    _once("ocannl_ast", writing)  # fills the rewrite cache and writes the bytecode cache
    warm, cold = [], []
    for _ in range(repeats):
        warm.append(_once("ocannl_ast", warm_env))
        cold.append(_once("ocannl_ast", cold_env))
    return stat_of(warm), stat_of(cold)


_BUILD_ALL = ("import json, time, ocannl_ast; from ocannl_ast.rewrite import decorator; "
              "t = time.perf_counter(); n = decorator.materialize_deferred(); "
              "print(json.dumps([time.perf_counter() - t, n]))")


def build_all(repeats: int, **env: str) -> tuple[Stat, int]:
    """Seconds to build every library @op/@cd function after `import ocannl_ast` (each is
    otherwise built at its first call), fresh process each time; and how many there are."""
    import subprocess

    samples, count = [], 0
    for _ in range(repeats):
        out = subprocess.run([sys.executable, "-c", _BUILD_ALL], capture_output=True,
                             text=True, check=True, env=_env(**env))
        sec, count = json.loads(out.stdout.strip().splitlines()[-1])
        samples.append(sec)
    return stat_of(samples), count


def libcst_modules() -> int:
    """How many libcst modules a warm `import ocannl_ast` imports (it should be 0)."""
    import subprocess

    code = ("import sys, ocannl_ast; "
            "print(sum(m.split('.')[0] == 'libcst' for m in list(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=_env())
    return int(out.stdout.strip().splitlines()[-1])


def heaviest_imports(top: int = 4) -> str:
    """The modules with the largest self time in one `python -X importtime` run."""
    import subprocess

    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import ocannl_ast"],
                          capture_output=True, text=True, check=True)
    found: list[tuple[int, str]] = []
    for line in proc.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[0].strip().isdigit():
            found.append((int(parts[0]), parts[2].strip()))
    return ", ".join(f"{name} {us / 1e3:.0f} ms" for us, name in sorted(found)[::-1][:top])


def run(quick: bool = False) -> list[Row]:
    repeats = QUICK_REPEATS if quick else REPEATS
    ours, cold = warm_and_cold(repeats)
    base = import_time("numpy", repeats)
    libcst = libcst_modules()
    built, n = build_all(repeats)
    built_cold, _ = build_all(min(repeats, QUICK_REPEATS), OCANNL_AST_REWRITE_CACHE="off")
    return [Row("import", "import numpy (reference)", base.show()),
            Row("import", "import ocannl_ast (includes numpy)", ours.show(),
                f"<= {TARGET_S * 1e3:g} ms", ours.median <= TARGET_S),
            Row("import", "import ocannl_ast, rewrite cache off", cold.show()),
            Row("import", f"then building all {n} library @op/@cd functions (else at first "
                "call): warm rewrite cache | cache off", f"{built.show()} | {built_cold.show()}"),
            Row("import", "libcst modules imported (warm rewrite cache)", f"{libcst} modules",
                "0", libcst == 0),
            Row("import", "largest self times (-X importtime, one run)", heaviest_imports())]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="3 repeats instead of 9")
    print_table(run(ap.parse_args().quick))
