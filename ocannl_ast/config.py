"""The environment knobs, read in one place (every `OCANNL_AST_*` variable).

Each function reads the environment when called, so a knob set by a test or a notebook
cell takes effect for the next compile. No other module reads `os.environ`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

_PREFIX = "OCANNL_AST_"


def _raw(name: str) -> str | None:
    return os.environ.get(_PREFIX + name)


def _on(name: str, default: bool) -> bool:
    """A switch: "1" on, "0" off, unset `default` (surrounding spaces ignored)."""
    raw = _raw(name)
    if raw is None:
        return default
    return raw.strip() != "0" if default else raw.strip() == "1"


def checking() -> bool:
    """``OCANNL_AST_CHECK=1``: verify every IR between stages and check routines' inputs
    (the test suite sets it)."""
    return _on("CHECK", False)


def virtualize() -> bool:
    """``OCANNL_AST_VIRTUALIZE``: inline single-use intermediates (on unless "0")."""
    return _on("VIRTUALIZE", True)


def schedule() -> bool:
    """``OCANNL_AST_SCHEDULE``: the scheduling passes (unroll small reductions, loop
    interchange, fusion of pointwise nests, parallel loops; on unless "0")."""
    return _on("SCHEDULE", True)


def reorder() -> bool:
    """``OCANNL_AST_REORDER``: let the C backend hoist small reductions (on unless "0")."""
    return _on("REORDER", True)


def lanes() -> bool:
    """``OCANNL_AST_LANES``: let the C backend sum long reduction loops in 8 lanes (a fixed
    reassociation that vectorizes, `backends/c_lanes.py`; on unless "0")."""
    return _on("LANES", True)


def libm() -> bool:
    """``OCANNL_AST_LIBM=1``: the C backend calls libm's exp, log, tanh instead of its own
    vectorizable versions (`backends/c_math.py`; their error bounds: docs/generated_code.md)."""
    return _on("LIBM", False)


def debug() -> bool:
    """``OCANNL_AST_DEBUG=1``: the decorators re-raise internal errors unwrapped."""
    return _on("DEBUG", False)


def sanitize() -> bool:
    """``OCANNL_AST_SANITIZE=1``: build routines with AddressSanitizer and UBSan."""
    return _on("SANITIZE", False)


def cflags() -> tuple[str, ...] | None:
    """``OCANNL_AST_CFLAGS``: gcc's optimization flags, space-separated (None: unset)."""
    raw = _raw("CFLAGS")
    return None if raw is None else tuple(raw.split())


def threads() -> str:
    """``OCANNL_AST_THREADS`` as written ("" when unset): a count or ``auto``."""
    return (_raw("THREADS") or "").strip()


def cc_jobs() -> str:
    """``OCANNL_AST_CC_JOBS`` as written ("" when unset): how many translation units (gcc
    processes, run at once) a large C routine is split into -- a count, or ``auto`` for the
    CPUs this process may use; 1 keeps every routine one unit."""
    return (_raw("CC_JOBS") or "").strip()


def nvrtc_flags() -> tuple[str, ...]:
    """``OCANNL_AST_NVRTC_FLAGS``: NVRTC options added to the CUDA backend's own,
    space-separated (e.g. ``--Ofast-compile=min``; not those fixing its numerics)."""
    return tuple((_raw("NVRTC_FLAGS") or "").split())


def cuda_tile() -> str:
    """``OCANNL_AST_CUDA_TILE``: register tiling of CUDA reduction kernels, ``0``, ``1``
    (default) or ``all`` (validated by `backends.cuda_tile.mode`)."""
    return (_raw("CUDA_TILE") or "1").strip().lower()


def cuda_gemm() -> str:
    """``OCANNL_AST_CUDA_GEMM``: CUDA contractions through shared-memory tiles, ``0``,
    ``1`` (default) or ``all`` (validated by `backends.cuda_gemm.mode`)."""
    return (_raw("CUDA_GEMM") or "1").strip().lower()


def cuda_reduce() -> str:
    """``OCANNL_AST_CUDA_REDUCE``: long CUDA reductions into few cells shared by a block,
    ``0``, ``1`` (default) or ``all`` (validated by `backends.cuda_reduce.mode`)."""
    return (_raw("CUDA_REDUCE") or "1").strip().lower()


def cuda_graphs() -> bool:
    """``OCANNL_AST_CUDA_GRAPHS``: a CUDA routine replays its kernel launches as a captured
    CUDA graph (on unless "0": then each call launches every kernel from Python)."""
    return _on("CUDA_GRAPHS", True)


def cache_root() -> Path:
    """``OCANNL_AST_CACHE``, else ``~/.cache/ocannl_ast``: compiled C routines are kept in
    it directly when it is set (in ``c/`` below the default), CUDA images in ``cuda/``,
    rewritten decorator bodies in ``rewrite/``."""
    raw = _raw("CACHE")
    return Path(raw) if raw else Path.home() / ".cache" / "ocannl_ast"


def c_cache_dir() -> Path:
    """Where compiled C routines are cached (see `cache_root`)."""
    return Path(raw) if (raw := _raw("CACHE")) else cache_root() / "c"


def object_cache_dir() -> Path | None:
    """``OCANNL_AST_OBJECT_CACHE``: one directory for the shared objects (the contraction
    kernel, compiled once per source and flags) of every compile cache, e.g. several
    ``OCANNL_AST_CACHE`` directories or processes; unset or empty: ``shared/`` inside each
    routine's cache directory. The objects are named by a digest of their source and flags
    and checked against their own digests, so sharing them is safe."""
    raw = _raw("OBJECT_CACHE")
    return Path(raw) if raw and raw.strip() else None


def prebuilt_dir() -> Path | None:
    """``OCANNL_AST_PREBUILT`` (empty, "0" or "off": none), else ``_prebuilt/`` inside the
    installed package: what is built once per installation (``python -m
    ocannl_ast.prebuilt``, run by ``scripts/setup.sh``) and only read afterwards -- the
    contraction kernel's object files (``objects/``) and the library's own rewritten @op/@cd
    functions (``rewrite/``). Every entry there is named by a digest of what it was built
    from (source, flags, compiler, CPU, interpreter) and checked against its own digest
    when read; a missing or foreign entry is built into the caches as before."""
    raw = _raw("PREBUILT")
    if raw is not None:
        return None if raw.strip().lower() in ("", "0", "off") else Path(raw)
    return Path(__file__).resolve().parent / "_prebuilt"


def rewrite_cache_dir() -> Path | None:
    """``OCANNL_AST_REWRITE_CACHE`` (empty, "0" or "off": no cache), else
    ``cache_root()/rewrite`` (the path is built once per value of the variables it reads:
    every decorated function asks at import)."""
    return _rewrite_cache_dir(_raw("REWRITE_CACHE"), _raw("CACHE"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=8)
def _rewrite_cache_dir(own: str | None, _cache: str | None, _home: str | None) -> Path | None:
    if own is not None:
        return None if own.strip().lower() in ("", "0", "off") else Path(own)
    return cache_root() / "rewrite"
