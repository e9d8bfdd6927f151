"""On-disk cache of rewritten @op/@cd functions, so that a warm import never loads libcst.

Input: the inputs of one rewrite (the function's source text and position, kind, qualname,
free variables, code flags). Output: the compiled code object (positions already on the
user's lines) and the span table (`__oc_spans__`) of an earlier identical rewrite, or None.

An entry is keyed by a SHA-256 of those inputs, the interpreter's bytecode magic number and
a fingerprint of the rewriter itself (the source of every module the rewrite depends on:
a change to the rewriter, i.e. a new library version that touches it, invalidates all
entries). Entries are written atomically (temporary file + rename) and carry a digest of
their payload: a truncated, damaged or foreign entry is ignored and rewritten. When the
directory cannot be used the cache is silently skipped (the rewrite still happens).

Directory: ``$OCANNL_AST_REWRITE_CACHE`` (``off`` or ``0`` disables the cache), else
``$OCANNL_AST_CACHE/rewrite``, else ``~/.cache/ocannl_ast/rewrite``; a miss there reads the
installation's prebuilt rewrites of the library's own functions (`config.prebuilt_dir`).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import marshal
import os
import sys
import types
from importlib.util import MAGIC_NUMBER
from pathlib import Path

from ocannl_ast import config
from ocannl_ast.errors import Span

FORMAT = b"ocannl_ast-rewrite-cache 1\n"  #: first line of every entry; bump on layout change
_DIGEST = hashlib.sha256().digest_size
_PKG = Path(__file__).resolve().parent.parent
#: What the rewritten code depends on besides the function itself.
_DEPENDS = ("rewrite/*.py", "vocabulary.py", "errors.py")
Entry = tuple[types.CodeType, tuple[Span, ...]]


def cache_dir() -> Path | None:
    """The directory of the rewrite cache, or None when it is disabled."""
    return config.rewrite_cache_dir()


@functools.cache
def fingerprint() -> str | None:
    """A digest of the rewriter's own source files and of the interpreter's bytecode (None
    when those files cannot be read: then nothing is cached)."""
    h = hashlib.sha256(FORMAT + MAGIC_NUMBER + sys.version.encode())
    try:
        for pattern in _DEPENDS:
            for path in sorted(_PKG.glob(pattern)):
                h.update(path.relative_to(_PKG).as_posix().encode() + b"\0")
                h.update(path.read_bytes())
    except OSError:
        return None
    return h.hexdigest()


def entry_key(text: str, filename: str, first_line: int, kind: str, qualname: str,
              name: str, freevars: tuple[str, ...], flags: int) -> str | None:
    """The key of one rewrite: a hash of everything its result depends on (None: the cache
    is off or the rewriter's fingerprint is unavailable)."""
    rewriter = fingerprint()
    if rewriter is None or cache_dir() is None:
        return None
    parts = (rewriter, kind, qualname, name, filename, str(first_line), str(flags),
             ",".join(freevars), text)
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def _path(directory: Path, key: str) -> Path:
    return directory / key[:2] / f"{key}.bin"


def _decode(key: str, blob: bytes) -> Entry | None:
    """The entry stored in `blob`, or None when it is damaged or not for `key`."""
    head = len(FORMAT)
    if blob[:head] != FORMAT or len(blob) < head + _DIGEST:
        return None
    digest, payload = blob[head : head + _DIGEST], blob[head + _DIGEST :]
    if hashlib.sha256(payload).digest() != digest:
        return None
    try:
        stored_key, code, raw_spans = marshal.loads(payload)
        spans = tuple(Span(f, ln, c, t) for f, ln, c, t in raw_spans)
    except (ValueError, TypeError, EOFError):
        return None
    if stored_key != key or not isinstance(code, types.CodeType):
        return None
    return code, spans


def load(key: str) -> Entry | None:
    """The cached rewrite for `key`, or None (no cache, no entry, or a damaged entry): from
    the cache directory, else from the installation's prebuilt rewrites (the library's own
    functions, ``rewrite/`` of `config.prebuilt_dir`), only read."""
    directory = cache_dir()
    if directory is None:
        return None
    prebuilt = config.prebuilt_dir()
    for place in (directory, None if prebuilt is None else prebuilt / "rewrite"):
        if place is None:
            continue
        try:
            blob = _path(place, key).read_bytes()
        except OSError:
            continue
        found = _decode(key, blob)
        if found is not None:
            return found
    return None


def store(key: str, code: types.CodeType, spans: tuple[Span, ...]) -> None:
    """Record a rewrite (atomically); any failure to write only means no cache."""
    directory = cache_dir()
    if directory is None:
        return
    raw_spans = tuple((s.file, s.line, s.col, s.text) for s in spans)
    payload = marshal.dumps((key, code, raw_spans))
    blob = FORMAT + hashlib.sha256(payload).digest() + payload
    path = _path(directory, key)
    tmp: str | None = None
    import tempfile  # only on a miss: a warm import never loads it

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "wb") as out:
            out.write(blob)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
