"""Facts about loop-IR nodes memoized for the passes of one pipeline run.

The loop-IR passes ask the same questions of the same units over and over (their reads and
writes, their loop nests, whether one is a reduction): a pass rebuilds only the units it
changes, so most units reach the next pass as the same objects. Within `shared()` (the
pipeline runs its stages inside it) those answers are kept by node identity, each memo
holding its nodes so that no id is reused while it lives; outside it nothing is kept and
every question is answered afresh (the backends' calls, tests). The facts memoized are
pure functions of an immutable node.

Stage: shared by the loop-IR passes (`walk.Accesses`, `nests`, `schedule.cell_injective`).
Input: loop-IR nodes. Output: what the memoized function returns for them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

Table = dict[Any, Any]  #: id(node) (or ids) -> (node(s), fact)

#: the memos of the running pipeline, by name (None: outside a run, nothing is kept)
_tables: ContextVar[dict[str, Table] | None] = ContextVar("ocannl_ast_unit_memo", default=None)


@contextmanager
def shared() -> Iterator[None]:
    """Keep the memoized facts for the duration of the block (nested blocks share the
    outermost one's). Example: ``with unit_memo.shared(): prog = fuse_nests(prog).prog``."""
    if _tables.get() is not None:
        yield
        return
    token = _tables.set(defaultdict(dict))
    try:
        yield
    finally:
        _tables.reset(token)


def table(name: str) -> Table:
    """The memo `name` of the running block (a fresh, unshared one outside `shared`)."""
    tables = _tables.get()
    return {} if tables is None else tables[name]


def memoized(fn: Callable[[T], R]) -> Callable[[T], R]:
    """`fn` (a pure function of one immutable node), its answers kept within `shared`."""
    name = f"{fn.__module__}.{fn.__qualname__}"

    def memo(node: T) -> R:
        tables = _tables.get()
        if tables is None:
            return fn(node)
        t = tables[name]  # (a defaultdict: made on first use)
        hit = t.get(id(node))
        if hit is not None:
            return hit[1]  # type: ignore[no-any-return]
        out = fn(node)
        t[id(node)] = (node, out)
        return out

    memo.__doc__, memo.__name__, memo.__qualname__ = fn.__doc__, fn.__name__, fn.__qualname__
    memo.__wrapped__ = fn  # type: ignore[attr-defined]
    return memo
