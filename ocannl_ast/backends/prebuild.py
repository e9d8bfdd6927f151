"""Build the C backend's contraction kernel objects into the compile cache ahead of time.

Stage: setup (``scripts/setup.sh`` runs it; ``python -m ocannl_ast.backends.prebuild``).
Input: the cache directory (``$OCANNL_AST_CACHE`` or ``~/.cache/ocannl_ast/c``). Output: its
``shared/ocannl_shared-*.o`` files for float32 and float64, without and with OpenMP (the
builds routines link: `c_backend.compile_c` with the default flags), so the first routine
compiled on this machine finds them (`compiler.ensure_object` keeps a cached object whose
digest matches). Otherwise the first routine of a cache directory that calls the kernel
builds the one it needs (about 1 s of gcc CPU), starting when its context begins lowering
(`CBackend.prepare`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
from collections.abc import Sequence
from pathlib import Path

from ocannl_ast.backends.c_backend import kernel_objects
from ocannl_ast.backends.c_syntax import C
from ocannl_ast.backends.compiler import (
    DEFAULT_OPT_FLAGS,
    cache_dir_default,
    effective_flags,
    ensure_object,
    object_name,
    object_path,
)
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering.loop_ir import Precision

#: What `prebuild` builds by default: the element types of float32 and float64 routines.
PRECISIONS = (Precision.FLOAT32, Precision.FLOAT64)


def prebuild(directory: Path | None = None, precisions: Sequence[Precision] = PRECISIONS,
             openmp: Sequence[bool] = (False, True), objects_dir: Path | None = None
             ) -> list[Path]:
    """Compile (unless cached) the kernel objects of `precisions`, without and/or with
    ``-fopenmp``, into the compile cache `directory` (default: `cache_dir_default`), or
    straight into `objects_dir` when given (the installation's prebuilt objects,
    `ocannl_ast.prebuilt`), all at once; their paths.
    Example: ``prebuild(precisions=[Precision.FLOAT32], openmp=[False])``."""
    directory = cache_dir_default() if directory is None else directory
    jobs: list[tuple[Path, str, tuple[str, ...]]] = []
    for precision in precisions:
        for omp in openmp:
            flags = (*effective_flags(DEFAULT_OPT_FLAGS), *(("-fopenmp",) if omp else ()),
                     *C.compile_flags)
            for unit in kernel_objects(C, C.words(precision)):
                path = object_path(directory, unit, flags) if objects_dir is None \
                    else objects_dir / object_name(unit, flags)
                jobs.append((path, unit, flags))
    with concurrent.futures.ThreadPoolExecutor(max(1, len(jobs))) as pool:
        for job in [pool.submit(ensure_object, *j) for j in jobs]:
            job.result()
    return [path for path, _, _ in jobs]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--precision", action="append", choices=[p.value for p in PRECISIONS],
                    help="only this element type (repeatable; default: all)")
    ap.add_argument("--cache", type=Path, help="cache directory (default: $OCANNL_AST_CACHE "
                    "or ~/.cache/ocannl_ast/c)")
    args = ap.parse_args(argv)
    chosen = [Precision(p) for p in args.precision] if args.precision else list(PRECISIONS)
    try:
        paths = prebuild(args.cache, chosen)
    except (BackendError, OSError) as exc:
        print(f"ocannl_ast prebuild: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
