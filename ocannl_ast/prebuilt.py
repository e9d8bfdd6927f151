"""Build what an installation keeps prebuilt (`config.prebuilt_dir`, ``_prebuilt/`` in the
package): the C backend's contraction kernel objects (float32 and float64, without and with
OpenMP) and the library's own @op/@cd functions rewritten. Routines compiled later link
those objects and the library's functions load those rewrites, whatever compile and rewrite
caches they use (``OCANNL_AST_CACHE``): a fresh cache compiles only the routine itself.
Everything there is named by a digest of what it was built from and verified when read, so
a stale or foreign entry is never used (it is built into the caches instead).

Stage: setup (``scripts/setup.sh`` runs ``python -m ocannl_ast.prebuilt``). Input: the
package's sources, gcc. Output: ``objects/*.o`` and ``rewrite/`` below the directory; the
paths of the objects on stdout. Cached: a second run builds nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ocannl_ast import config
from ocannl_ast.errors import BackendError


def build_objects(directory: Path) -> list[Path]:
    """The contraction kernel's objects, built (unless there) into ``directory/objects``."""
    from ocannl_ast.backends.prebuild import prebuild

    return prebuild(objects_dir=directory / "objects")


def build_rewrites(directory: Path) -> int:
    """The library's own @op/@cd functions rewritten into ``directory/rewrite`` (unless
    there); how many functions the library has."""
    import ocannl_ast.nn  # noqa: F401  (declares the layers' functions)
    from ocannl_ast.rewrite.decorator import materialize_deferred

    # rewrites are looked up (and stored) there only: not in another prebuilt directory
    places = {"OCANNL_AST_REWRITE_CACHE": str(directory / "rewrite"),
              "OCANNL_AST_PREBUILT": str(directory)}
    saved = {k: os.environ.get(k) for k in places}
    os.environ.update(places)
    try:
        return materialize_deferred()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", type=Path, help="where to build (default: $OCANNL_AST_PREBUILT, "
                    "else _prebuilt/ in the package)")
    ap.add_argument("--what", choices=("all", "objects", "rewrite"), default="all",
                    help="only the kernel objects, or only the library's rewrites")
    args = ap.parse_args(argv)
    directory = args.dir or config.prebuilt_dir()
    if directory is None:
        print("ocannl_ast prebuilt: OCANNL_AST_PREBUILT is off; nothing built", file=sys.stderr)
        return 0
    try:
        directory.mkdir(parents=True, exist_ok=True)
        paths = build_objects(directory) if args.what in ("all", "objects") else []
        if args.what in ("all", "rewrite"):
            build_rewrites(directory)
    except (BackendError, OSError) as exc:
        print(f"ocannl_ast prebuilt: {exc}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
