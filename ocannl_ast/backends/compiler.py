"""gcc invocation and the on-disk cache of compiled shared objects.

Stage: after rendering. Input: a C translation unit and gcc flags. Output: the paths of a
verified cache entry (`build_cached`): ``<stem>.c`` (the source), ``<stem>.so`` and
``<stem>.json`` (sha256 digests of the source and of the .so bytes). A routine rendered as
several translation units (`c_backend`) adds ``<stem>.u1.c``, ... : each unit is compiled to
an object file by its own gcc, in parallel, then they are linked into the one .so. Every file is written
to a temporary name and renamed, so readers never see half a file; an entry whose digests
do not match (truncated, swapped, garbage) is rebuilt; an unusable cache directory (not
writable, a file, ...) is replaced by a private temporary directory, with a warning.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import functools
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ocannl_ast import config
from ocannl_ast.errors import BackendError

DEFAULT_OPT_FLAGS: tuple[str, ...] = ("-O2", "-march=native", "-fvect-cost-model=cheap")
#: Always passed: no FMA contraction and no fast-math, so results match NumPy exactly
#: for + - * /; -fno-math-errno only drops errno writes (lets sqrt inline).
REQUIRED_FLAGS: tuple[str, ...] = (
    "-shared", "-fPIC", "-std=c11", "-ffp-contract=off", "-fno-math-errno",
)
#: Added with ``OCANNL_AST_SANITIZE=1`` (they are part of the cache key). Loading such a
#: library into Python needs the ASan runtime preloaded: see ``scripts/test.sh --sanitize``.
SANITIZE_FLAGS: tuple[str, ...] = (
    "-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all", "-g",
)
CC = "gcc"
_STDERR_LINES = 40
_META_VERSION = 1


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """The files of one compiled routine in a cache directory."""

    c_path: Path  #: the generated C source (the unit with the entry point)
    so_path: Path  #: the shared object compiled from it
    meta_path: Path  #: JSON digests of both
    extra_paths: tuple[Path, ...] = ()  #: the routine's other translation units, if any


def cache_dir_default() -> Path:
    """``$OCANNL_AST_CACHE``, else ``~/.cache/ocannl_ast/c``."""
    return config.c_cache_dir()


def effective_flags(opt_flags: Sequence[str]) -> tuple[str, ...]:
    """gcc flags: ``$OCANNL_AST_CFLAGS`` (space-separated) or `opt_flags`, then the sanitizer
    flags when ``OCANNL_AST_SANITIZE=1``, then `REQUIRED_FLAGS`."""
    env = config.cflags()
    flags = env if env is not None else tuple(opt_flags)
    if config.sanitize():
        flags += SANITIZE_FLAGS
    return (*flags, *REQUIRED_FLAGS)


@functools.lru_cache(maxsize=4)
def _compiler_id(cc: str) -> str:
    try:
        proc = subprocess.run([cc, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise BackendError(f"C compiler {cc!r} is not usable: {exc}") from None
    return proc.stdout.splitlines()[0] if proc.stdout else cc


@functools.lru_cache(maxsize=1)
def _cpu_id() -> str:
    """The host CPU's model and feature flags: what ``-march=native`` depends on."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return os.uname().machine
    wanted = ("model name", "flags", "Features", "CPU part")
    lines = [ln for ln in text.splitlines() if ln.split(":")[0].strip() in wanted]
    return "\n".join(dict.fromkeys(lines))  # one copy per distinct line


def cache_key(source: str, flags: Sequence[str], dialect: str = "",
              extra_units: Sequence[str] = (), objects: Sequence[str] = ()) -> str:
    """sha256 over the source, the flags, the compiler version, the dialect's fingerprint
    (`CSyntax.fingerprint`) when given, the other translation units and the shared objects'
    sources when any, and the CPU for ``-march=native``."""
    h = hashlib.sha256()
    parts = (source, "\0".join(flags), _compiler_id(CC), *((dialect,) if dialect else ()),
             *(("units", *extra_units) if extra_units else ()),
             *(("objects", *objects) if objects else ()))
    for part in parts:
        h.update(part.encode())
        h.update(b"\x00\x01")
    if any("native" in f for f in flags):
        h.update(_cpu_id().encode())
    return h.hexdigest()


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = _temp_name(path)
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _run_gcc(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def _check(proc: subprocess.CompletedProcess[str], cmd: list[str], c_path: Path) -> None:
    if proc.returncode != 0:
        err = "\n".join(proc.stderr.splitlines()[:_STDERR_LINES])
        raise BackendError(
            f"{CC} failed (exit {proc.returncode}) on the generated file {c_path}\n"
            f"command: {' '.join(cmd)}\n{err}"
        )


def _gcc(cmd: list[str], c_path: Path) -> None:
    """Run one gcc command on the generated file `c_path`: a located error if it fails."""
    try:
        proc = _run_gcc(cmd)
    except OSError as exc:
        raise BackendError(f"could not run {CC} on {c_path}: {exc}") from None
    _check(proc, cmd, c_path)


def _compile(c_path: Path, out: Path, flags: Sequence[str]) -> None:
    """Run gcc on `c_path`, writing the shared object `out` (a temporary name)."""
    _gcc([CC, *flags, "-o", str(out), str(c_path), "-lm"], c_path)


def _compile_units(c_paths: Sequence[Path], out: Path, flags: Sequence[str],
                   shared: Sequence[tuple[Path, str]] = ()) -> None:
    """Compile each translation unit to an object file, all at once (one gcc each) and
    while the shared objects `shared` (their paths and sources) are made sure of, then link
    them all into the shared object `out`. The units' objects are temporary files beside
    `out`."""
    objs = [_temp_name(c.with_suffix(".o")) for c in c_paths]
    try:
        with concurrent.futures.ThreadPoolExecutor(len(c_paths) + len(shared)) as pool:
            jobs = [pool.submit(_gcc, [CC, *flags, "-c", "-o", str(o), str(c)], c)
                    for c, o in zip(c_paths, objs)]
            jobs += [pool.submit(ensure_object, path, text, flags)
                     for path, text in shared]
            for job in jobs:  # the first failing unit, in unit order
                job.result()
        _gcc([CC, *flags, "-o", str(out), *map(str, objs), *(str(p) for p, _ in shared),
              "-lm"], c_paths[0])
    finally:
        for o in objs:
            o.unlink(missing_ok=True)


# ---- shared objects: sources compiled once per cache directory, linked into routines ----

_OBJECTS_LOCK = threading.Lock()
#: object path -> the build of it running in this process (another thread waits for it)
_OBJECTS_BUILDING: dict[Path, concurrent.futures.Future[None]] = {}


def object_name(source: str, flags: Sequence[str]) -> str:
    """The file name of the object of the shared unit `source` compiled with `flags`."""
    return f"ocannl_shared-{cache_key(source, flags)[:32]}.o"


def object_path(directory: Path, source: str, flags: Sequence[str]) -> Path:
    """Where the object file of the shared unit `source` compiled with `flags` is: the
    installation's prebuilt one (``objects/`` of `config.prebuilt_dir`) when it is there
    and matches its digest, else the cached one: ``shared/ocannl_shared-<key>.o`` below
    `directory`, or in ``$OCANNL_AST_OBJECT_CACHE`` when set (beside it its source ``.c``
    and its digest ``.json``)."""
    name = object_name(source, flags)
    prebuilt = config.prebuilt_dir()
    if prebuilt is not None and _object_ready(prebuilt / "objects" / name):
        return prebuilt / "objects" / name
    return (config.object_cache_dir() or directory / "shared") / name


def _object_ready(path: Path) -> bool:
    """The object file exists and matches the digest recorded after it was compiled."""
    try:
        meta = json.loads(path.with_suffix(".json").read_bytes())
        data = path.read_bytes()
    except (OSError, ValueError):
        return False
    return (isinstance(meta, dict) and meta.get("version") == _META_VERSION
            and meta.get("o_sha256") == _digest(data))


def _build_object(path: Path, source: str, flags: Sequence[str]) -> None:
    c_path = path.with_suffix(".c")
    path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(c_path, source.encode())
    tmp = _temp_name(path)
    try:
        _gcc([CC, *flags, "-c", "-o", str(tmp), str(c_path)], c_path)
        digest = _digest(tmp.read_bytes())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    meta = {"version": _META_VERSION, "o_sha256": digest, "flags": list(flags)}
    _write_atomic(path.with_suffix(".json"), json.dumps(meta, indent=1).encode())


def ensure_object(path: Path, source: str, flags: Sequence[str]) -> None:
    """Make sure `path` (`object_path`) holds `source` compiled with `flags` (``-c``): kept
    when its digest matches, else compiled; a build of it already running in this process
    (`prebuild_object`) is waited for rather than repeated."""
    with _OBJECTS_LOCK:
        running = _OBJECTS_BUILDING.get(path)
        if running is None:
            if _object_ready(path):
                return
            running = _OBJECTS_BUILDING[path] = concurrent.futures.Future()
            mine = True
        else:
            mine = False
    if not mine:
        try:
            running.result()
            if _object_ready(path):
                return
        except (BackendError, OSError):
            pass  # that build failed: this one reports its own error
        _build_object(path, source, flags)
        return
    try:
        _build_object(path, source, flags)
        running.set_result(None)
    except BaseException as exc:
        running.set_exception(exc)
        raise
    finally:
        with _OBJECTS_LOCK:
            _OBJECTS_BUILDING.pop(path, None)


def prebuild_object(directory: Path, source: str, flags: Sequence[str]) -> None:
    """Compile the shared unit `source` in a background thread unless it is cached, so that
    gcc runs while the caller still lowers the routine that links it; errors are left to
    the build that needs the object (`ensure_object` builds it again and reports them)."""
    path = object_path(directory, source, flags)
    with _OBJECTS_LOCK:
        if path in _OBJECTS_BUILDING:
            return
    if _object_ready(path):
        return

    def build() -> None:
        with contextlib.suppress(BackendError, OSError):
            ensure_object(path, source, flags)

    threading.Thread(target=build, name="ocannl_ast prebuild", daemon=False).start()


def _units_digest(units: Sequence[str]) -> str:
    """The digest of a routine's source: its one unit's, or that of all its units."""
    return _digest(units[0].encode() if len(units) == 1 else "\0".join(units).encode())


def _build(entry: CacheEntry, units: Sequence[str], flags: Sequence[str],
           objects: Sequence[str] = ()) -> None:
    """Write the source units, compile them (linking the shared `objects`, compiled once per
    directory: `ensure_object`), then rename the .so and write its digests: the .so
    appears whole, and its digest file only after it (a reader in between rebuilds)."""
    c_paths = (entry.c_path, *entry.extra_paths)
    for path, text in zip(c_paths, units):
        _write_atomic(path, text.encode())
    shared = [(object_path(entry.c_path.parent, text, flags), text)
              for text in objects]
    tmp = _temp_name(entry.so_path)
    try:
        if len(c_paths) == 1 and not shared:
            _compile(entry.c_path, tmp, flags)
        elif len(c_paths) == 1 and all(_object_ready(p) for p, _ in shared):
            _gcc([CC, *flags, "-o", str(tmp), str(entry.c_path), *(str(p) for p, _ in shared),
                  "-lm"], entry.c_path)
        else:
            _compile_units(c_paths, tmp, flags, shared)
        so_digest = _digest(tmp.read_bytes())
        os.replace(tmp, entry.so_path)
    finally:
        tmp.unlink(missing_ok=True)
    meta = {"version": _META_VERSION, "source_sha256": _units_digest(units),
            "so_sha256": so_digest, "flags": list(flags), "units": len(units)}
    _write_atomic(entry.meta_path, json.dumps(meta, indent=1).encode())


def entry_is_valid(entry: CacheEntry, source: str, extra_units: Sequence[str] = ()) -> bool:
    """The entry's source is `source` (and its other units `extra_units`) and its .so bytes
    match the recorded digest."""
    try:
        meta = json.loads(entry.meta_path.read_bytes())
        so_bytes = entry.so_path.read_bytes()
        texts = [p.read_bytes().decode() for p in (entry.c_path, *entry.extra_paths)]
    except (OSError, ValueError):
        return False
    want = _units_digest((source, *extra_units))
    return (
        isinstance(meta, dict) and meta.get("version") == _META_VERSION
        and meta.get("source_sha256") == want == _units_digest(texts)
        and meta.get("so_sha256") == _digest(so_bytes)
    )


def _entry(directory: Path, name: str, source: str, flags: Sequence[str],
           dialect: str, extra_units: Sequence[str] = (),
           objects: Sequence[str] = ()) -> CacheEntry:
    stem = f"{name}-{cache_key(source, flags, dialect, extra_units, objects)[:32]}"
    extra = tuple(directory / f"{stem}.u{k}.c" for k in range(1, len(extra_units) + 1))
    return CacheEntry(directory / f"{stem}.c", directory / f"{stem}.so",
                      directory / f"{stem}.json", extra)


_PRIVATE_DIRS: list[Path] = []
_WARNED: set[str] = set()


def _private_dir() -> Path:
    """This process's own temporary cache directory (removed at exit)."""
    if not _PRIVATE_DIRS:
        try:
            path = Path(tempfile.mkdtemp(prefix="ocannl_ast_c_"))
        except OSError as exc:
            raise BackendError(f"no usable directory for compiled routines: {exc}") from None
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _PRIVATE_DIRS.append(path)
    return _PRIVATE_DIRS[0]


def _warn_unusable(directory: Path, exc: OSError, fallback: Path) -> None:
    if str(directory) not in _WARNED:
        _WARNED.add(str(directory))
        warnings.warn(
            f"ocannl_ast: the compile cache {directory} is unusable ({exc.strerror or exc}); "
            f"compiling into the private directory {fallback} for this process instead "
            "(set OCANNL_AST_CACHE to a writable directory)",
            RuntimeWarning,
            stacklevel=4,
        )


def _build_in(directory: Path, name: str, source: str, flags: Sequence[str],
              dialect: str, rebuild: bool, extra_units: Sequence[str],
              objects: Sequence[str] = ()) -> CacheEntry:
    entry = _entry(directory, name, source, flags, dialect, extra_units, objects)
    if rebuild or not entry_is_valid(entry, source, extra_units):
        directory.mkdir(parents=True, exist_ok=True)
        _build(entry, (source, *extra_units), flags, objects)
    return entry


def build_cached(
    name: str, source: str, flags: Sequence[str], directory: Path, *, dialect: str = "",
    rebuild: bool = False, extra_units: Sequence[str] = (), objects: Sequence[str] = (),
) -> CacheEntry:
    """The verified cache entry of `source` (rendered in the dialect whose fingerprint is
    `dialect`) compiled with `flags`, built if missing or invalid (always with `rebuild`).
    `extra_units`: more translation units linked with `source` into the one shared object,
    all compiled at once. `objects`: sources compiled once per directory and flags
    (`ensure_object`: the contraction kernel) and linked in too.
    Example: ``build_cached("f", src, flags, dir).so_path``.
    """
    try:
        return _build_in(directory, name, source, flags, dialect, rebuild, extra_units,
                         objects)
    except OSError as exc:  # the directory cannot hold the entry: use a private one
        fallback = _private_dir()
        if directory == fallback:
            raise BackendError(f"cannot write the compiled routine {name}: {exc}") from None
        _warn_unusable(directory, exc, fallback)
        try:
            return _build_in(fallback, name, source, flags, dialect, rebuild, extra_units,
                             objects)
        except OSError as exc2:
            raise BackendError(f"cannot write the compiled routine {name}: {exc2}") from None
