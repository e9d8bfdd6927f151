"""NVRTC: compile CUDA C++ to PTX through cuda-python, cached on disk.

Stage: after rendering. Input: a translation unit and a virtual architecture
(``compute_90``). Output: PTX bytes (`compile_ptx`), cached under ``<cache>/cuda`` keyed by a
hash of the source, the architecture, the options and the NVRTC version; entries are
written atomically with a digest file and rebuilt when they do not verify. cuda-python is
imported lazily: without it a `BackendError` names the package to install.

NVRTC's time grows with the number of kernels (about 40 ms each for sm_90, half in NVVM, half
in ptxas), so `compile_parts` compiles a large routine as several programs of balanced size
at once, in threads (``nvrtcCompileProgram`` releases the GIL), each cached on its own.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ocannl_ast import config
from ocannl_ast.backends.compiler import _digest, _write_atomic
from ocannl_ast.errors import BackendError

#: No FMA contraction (as gcc's -ffp-contract=off), IEEE division and square root.
NVRTC_OPTIONS: tuple[str, ...] = ("-fmad=false", "-prec-div=true", "-prec-sqrt=true",
                                  "-ftz=false", "-std=c++17")
#: Kernels per program below which a routine is not split further (each program costs about
#: 70 ms of its own; a kernel about 40 ms).
MIN_PART_KERNELS = 32
#: The most programs (threads) ``OCANNL_AST_CC_JOBS=auto`` (the default) gives one routine.
MAX_AUTO_PARTS = 16
#: Option prefixes `OCANNL_AST_NVRTC_FLAGS` may not give: they would change the numerics.
NUMERIC_OPTIONS = ("-fmad", "--fmad", "-prec-", "--prec-", "-ftz", "--ftz", "-use_fast_math",
                   "--use_fast_math", "-std", "--std", "--gpu-architecture", "-arch")
INSTALL_HINT = ("pip install 'ocannl_ast[cuda]' (cuda-python 12 and nvidia-cuda-nvrtc-cu12), or "
                "'ocannl_ast[cuda13]' for CUDA 13")


def nvrtc_module() -> Any:
    """`cuda.bindings.nvrtc` (cuda-python >= 12.6), else the older `cuda.nvrtc`."""
    try:
        from cuda.bindings import nvrtc
    except ImportError:
        try:
            from cuda import nvrtc  # type: ignore[no-redef]
        except ImportError:
            raise BackendError(f"the CUDA backend needs cuda-python: {INSTALL_HINT}") from None
    return nvrtc


@functools.lru_cache(maxsize=1)
def nvrtc_version() -> str:
    nvrtc = nvrtc_module()
    try:
        err, major, minor = nvrtc.nvrtcVersion()
    except (RuntimeError, OSError) as exc:  # the library itself is missing
        raise BackendError(f"NVRTC cannot be loaded ({exc}): {INSTALL_HINT}") from None
    _ok(nvrtc, err, "nvrtcVersion")
    return f"{major}.{minor}"


def options() -> tuple[str, ...]:
    """`NVRTC_OPTIONS` and then ``OCANNL_AST_NVRTC_FLAGS`` (BackendError for a flag that would
    change the numerics or the architecture)."""
    extra = config.nvrtc_flags()
    for flag in extra:
        if flag.startswith(NUMERIC_OPTIONS):
            raise BackendError(f"OCANNL_AST_NVRTC_FLAGS may not set {flag!r}: the CUDA backend "
                               f"fixes {' '.join(NVRTC_OPTIONS)} and the architecture")
    return NVRTC_OPTIONS + extra


def _ok(nvrtc: Any, err: Any, what: str) -> None:
    if int(err) != 0:
        _, text = nvrtc.nvrtcGetErrorString(err)
        raise BackendError(f"NVRTC {what} failed: {text.decode(errors='replace')}")


def _log(nvrtc: Any, prog: Any) -> str:
    err, size = nvrtc.nvrtcGetProgramLogSize(prog)
    _ok(nvrtc, err, "nvrtcGetProgramLogSize")
    # a bytearray: NVRTC writes into the buffer, and a 1-byte bytes object (an empty log)
    # is CPython's shared b" " singleton, which it would turn into b"\x00" process-wide
    buf = bytearray(size)
    (err,) = nvrtc.nvrtcGetProgramLog(prog, buf)
    _ok(nvrtc, err, "nvrtcGetProgramLog")
    return buf.rstrip(b"\x00 ").decode(errors="replace").strip()


def nvrtc_compile(name: str, source: str, arch: str) -> tuple[bytes, str]:
    """The image of `source` for `arch`, and NVRTC's log (warnings): PTX for a virtual
    architecture (``compute_90``), a CUBIN for a real one (``sm_90``: SASS loads on any
    driver of the same major version, PTX only on one at least as new as NVRTC)."""
    nvrtc = nvrtc_module()
    nvrtc_version()
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), f"{name}.cu".encode(), 0, [], [])
    _ok(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode(), *(o.encode() for o in options())]
        (err,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        log = _log(nvrtc, prog)
        if int(err) != 0:
            raise BackendError(f"NVRTC could not compile the routine {name} for {arch}:\n{log}")
        kind = "CUBIN" if arch.startswith("sm_") else "PTX"
        err, size = getattr(nvrtc, f"nvrtcGet{kind}Size")(prog)
        _ok(nvrtc, err, f"nvrtcGet{kind}Size")
        image = bytearray(size)  # written by NVRTC (see `_log`)
        (err,) = getattr(nvrtc, f"nvrtcGet{kind}")(prog, image)
        _ok(nvrtc, err, f"nvrtcGet{kind}")
        return bytes(image), log
    finally:
        nvrtc.nvrtcDestroyProgram(prog)


def cuda_cache_dir() -> Path:
    """``$OCANNL_AST_CACHE/cuda``, else ``~/.cache/ocannl_ast/cuda``."""
    return config.cache_root() / "cuda"


def cache_key(source: str, arch: str) -> str:
    text = "\0".join([source, arch, *options(), nvrtc_version()])
    return hashlib.sha256(text.encode()).hexdigest()


def compile_ptx(name: str, source: str, arch: str, directory: Path | None = None) -> bytes:
    """The PTX (or CUBIN, for ``sm_*``) of `source` for `arch`, from the disk cache when a
    verified entry exists.

    Example: ``compile_ptx("f", render_cuda(prog), "compute_90")`` starts with ``//``.
    """
    directory = cuda_cache_dir() if directory is None else directory
    stem = directory / f"{name}-{cache_key(source, arch)[:32]}"
    suffix = ".cubin" if arch.startswith("sm_") else ".ptx"
    cu, ptx_path, meta_path = (stem.with_suffix(s) for s in (".cu", suffix, ".json"))
    try:
        meta = json.loads(meta_path.read_bytes())
        ptx = ptx_path.read_bytes()
        if meta.get("ptx_sha256") == _digest(ptx) and meta.get("source_sha256") == _digest(
                source.encode()):
            return ptx
    except (OSError, ValueError, AttributeError):
        pass
    ptx, _ = nvrtc_compile(name, source, arch)
    try:  # an unwritable cache only costs a recompile next time
        directory.mkdir(parents=True, exist_ok=True)
        _write_atomic(cu, source.encode())
        _write_atomic(ptx_path, ptx)
        meta_out = {"source_sha256": _digest(source.encode()), "ptx_sha256": _digest(ptx),
                    "arch": arch, "nvrtc": nvrtc_version()}
        _write_atomic(meta_path, json.dumps(meta_out, indent=1).encode())
    except OSError:
        pass
    return ptx


def nvrtc_jobs() -> int:
    """How many NVRTC programs (threads) a large routine may be split into:
    ``OCANNL_AST_CC_JOBS`` (a positive count), else (unset or ``auto``) the CPUs this process
    may use, at most `MAX_AUTO_PARTS`."""
    raw = config.cc_jobs()
    if raw in ("", "auto"):
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cpus = os.cpu_count() or 1
        return max(1, min(cpus, MAX_AUTO_PARTS))
    if not raw.isdigit() or int(raw) < 1:
        raise BackendError(f"OCANNL_AST_CC_JOBS must be a positive count or 'auto', got {raw!r}")
    return int(raw)


def part_count(kernels: int, jobs: int | None = None) -> int:
    """Programs for a routine of `kernels` kernels: `jobs` (default `nvrtc_jobs()`), but
    each of at least `MIN_PART_KERNELS` kernels."""
    jobs = nvrtc_jobs() if jobs is None else jobs
    return max(1, min(jobs, kernels // MIN_PART_KERNELS))


def compile_parts(name: str, sources: Sequence[str], arch: str,
                  compile_one: Callable[[str, str, str], bytes] | None = None) -> list[bytes]:
    """The images of `sources` (programs ``name``, ``name_p1``, ...), compiled at once in
    threads by `compile_one` (default `compile_ptx` into the default cache)."""
    one = compile_ptx if compile_one is None else compile_one
    names = [name if i == 0 else f"{name}_p{i}" for i in range(len(sources))]
    if len(sources) == 1:
        return [one(name, sources[0], arch)]
    nvrtc_version()  # loaded once, before the threads
    with ThreadPoolExecutor(len(sources), thread_name_prefix="nvrtc") as pool:
        return list(pool.map(one, names, sources, [arch] * len(sources)))
