"""Unique, stable, hierarchical tensor names (`tensor.name`), a leaf module.

Every call of an `@op` function opens a *name scope* named after the function; a
declaration (a parameter, a term, a persistent node) made inside takes the name
``"<enclosing scopes>.<declaration>"``, e.g. ``"mlp.linear_1.w"``. The rule for numbering:

* a scope is named after its function: inside one enclosing scope instance, the first
  call of a function is ``<function>``, the next ones ``<function>_1``, ``<function>_2``,
  ... (``linear``, ``linear_1``); top-level calls are numbered across the process;
* a declaration made again in the same scope instance is numbered the same way (``w``,
  ``w_1``); scope and declaration segments share one namespace per scope instance (a
  segment already taken gets the next free number), and '.', '/' and '#' in a label
  become '_', so full names never collide;
* optimizer state declared for a parameter `p` (`state_of(p.name)`) is named
  ``"<p.name>/<declaration>"``, e.g. ``"mlp.linear.w/adam_m"``;
* any other tensor (operation results, constants) is named ``"<scope path>.<label>#<k>"``,
  k counting such tensors in the scope instance (e.g. ``"add#3"`` at top level); these
  never take a declaration's number, so adding an operation renames no parameter.

Names depend only on the order of calls and declarations, so the same program gives the
same names in every process; they are unique within a process.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import threading
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

R = TypeVar("R")

_lock = threading.Lock()
_UNSAFE = re.compile(r"[./#\s]")


def segment(label: str) -> str:
    """A label as one name segment: '.', '/', '#' and spaces become '_' (never empty)."""
    return _UNSAFE.sub("_", label) or "_"


class Scope:
    """One scope instance: its full path and the segments taken inside it."""

    __slots__ = ("_auto", "_counts", "_taken", "path", "sep")

    def __init__(self, path: str, sep: str = ".") -> None:
        self.path = path
        self.sep = sep  #: between the path and a child segment
        self._counts: dict[str, int] = {}
        self._taken: set[str] = set()
        self._auto = itertools.count()

    def child(self, label: str) -> str:
        """A fresh full name for `label` in this scope (numbered when taken)."""
        base = segment(label)
        with _lock:
            k = self._counts.get(base, 0)
            seg = base if k == 0 else f"{base}_{k}"
            while seg in self._taken:
                k += 1
                seg = f"{base}_{k}"
            self._counts[base] = k + 1
            self._taken.add(seg)
        return f"{self.path}{self.sep}{seg}" if self.path else seg

    def auto(self, label: str) -> str:
        """The name of an undeclared tensor: `<path>.<label>#<k>`."""
        k = next(self._auto)
        base = f"{segment(label)}#{k}"
        return f"{self.path}{self.sep}{base}" if self.path else base


_ROOT = Scope("")
_current: ContextVar[Scope] = ContextVar("name_scope", default=_ROOT)
_states: dict[str, Scope] = {}


@contextlib.contextmanager
def scope(name: str) -> Iterator[None]:
    """Declarations inside are named under a fresh instance of scope `name` (an @op call)."""
    tok = _current.set(Scope(_current.get().child(name)))
    try:
        yield
    finally:
        _current.reset(tok)


@contextlib.contextmanager
def state_of(param_name: str) -> Iterator[None]:
    """Declarations inside are optimizer state of the parameter named `param_name`:
    ``"<param_name>/<declaration>"``."""
    with _lock:
        st = _states.get(param_name)
        if st is None:
            st = _states[param_name] = Scope(param_name, "/")
    tok = _current.set(st)
    try:
        yield
    finally:
        _current.reset(tok)


def state_code(param: Any, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """`fn(*args, **kwargs)` (an optimizer's @cd step for `param`) with the nodes it
    declares named as `param`'s state: ``"<param.name>/<declaration>"``."""
    with state_of(param.name):
        return fn(*args, **kwargs)


def declare(label: str) -> str:
    """The unique name of a declaration (param, term, node) made now."""
    return _current.get().child(label)


def auto(label: str) -> str:
    """The unique name of an undeclared tensor (an operation result, a constant)."""
    return _current.get().auto(label)
