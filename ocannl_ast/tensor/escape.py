"""Which tensors escape a routine: the ones the user holds. A tensor a caller's frame
references (a local or global variable, an element of a list / tuple / set / dict held
there, or an attribute of an object held there) may be read with `ctx.get` after the
routine runs, so its value and grad buffers stay materialized; every other intermediate
may be virtualized. Input: the call stack at compile time. Output: buffer ids.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from types import FrameType, FunctionType, ModuleType
from typing import Any

from .node import NodeRef, Tensor, buffer_ids

_LIBRARY = "ocannl_ast"


@functools.cache
def _installed() -> tuple[str, ...]:
    """Installed code (the standard library, site-packages): its frames hold no user
    tensors (read at the first compile, not at import)."""
    import sysconfig

    return tuple({p for k in ("stdlib", "platstdlib", "purelib", "platlib")
                  if (p := sysconfig.get_paths().get(k))})


def user_held() -> set[int]:
    """Ids of the value and grad buffers of the tensors (alias targets included) the
    calling user frames reference."""
    out: set[int] = set()
    seen_globals: set[int] = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if _is_user(frame):
            values = list(frame.f_locals.values())
            if id(frame.f_globals) not in seen_globals:
                seen_globals.add(id(frame.f_globals))
                if frame.f_globals is not frame.f_locals:
                    values.extend(frame.f_globals.values())
            for v in values:
                for t in _tensors(v, 2):
                    out.update(buffer_ids(t))
                    out.update(buffer_ids(t.base()))
        frame = frame.f_back
    return out


def _is_user(frame: FrameType) -> bool:
    """Not this library's frame, nor installed code's (pytest, runpy, ...)."""
    name = str(frame.f_globals.get("__name__", ""))
    if name == _LIBRARY or name.startswith(_LIBRARY + "."):
        return False
    path = frame.f_code.co_filename
    return not path.startswith(("<frozen", *_installed()))


def _tensors(v: Any, depth: int) -> Iterator[Tensor]:
    """Tensors in `v`: itself, its container elements or attributes, `depth` levels."""
    if isinstance(v, Tensor):
        yield v
        return
    if isinstance(v, NodeRef):
        yield v.tensor
        return
    if depth == 0 or isinstance(v, str | bytes | int | float | type | ModuleType |
                                   FunctionType):
        return
    items: Any
    if isinstance(v, dict):
        items = v.values()
    elif isinstance(v, list | tuple | set | frozenset):
        items = v
    else:
        attrs = getattr(v, "__dict__", None)
        if not isinstance(attrs, dict):
            return
        items = attrs.values()
    try:
        for x in list(items)[:10_000]:
            yield from _tensors(x, depth - 1)
    except (TypeError, RuntimeError):  # an exotic container: nothing found in it
        return
