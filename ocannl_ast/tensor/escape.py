"""Which tensors escape a routine: the ones the user holds. A tensor a caller's frame
references (a local or global variable, an element of a list / tuple / set / dict held
there, or an attribute of an object held there) may be read with `ctx.get` after the
routine runs, so its value and grad buffers stay materialized; every other intermediate
may be virtualized. Input: the call stack at compile time. Output: tensor ids.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType, FunctionType, ModuleType
from typing import Any

from .node import NodeRef, Tensor

_LIBRARY = "ocannl_ast"


def user_held() -> set[int]:
    """Ids of the tensors (alias targets included) the calling user frames reference."""
    out: set[int] = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if name != _LIBRARY and not name.startswith(_LIBRARY + "."):
            for v in (*frame.f_locals.values(), *_module_values(frame)):
                for t in _tensors(v, 2):
                    out.add(t.id)
                    out.add(t.base().id)
        frame = frame.f_back
    return out


def _module_values(frame: FrameType) -> list[Any]:
    """The frame's module-level variables (once per frame; no module globals for a
    frame that is itself module-level, whose locals are those globals)."""
    if frame.f_locals is frame.f_globals:
        return []
    return list(frame.f_globals.values())


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
