"""Unique, stable, hierarchical tensor names (`tensor.name`), a leaf module.

Every call of an `@op` function opens a *name scope* named after the function; a
declaration (a parameter, a term, a persistent node) made inside takes the name
``"<enclosing scopes>.<declaration>"``, e.g. ``"mlp.linear_1.w"``. The rule for numbering:

* a scope is named after its function: inside one enclosing scope instance, the first
  call of a function is ``<function>``, the next ones ``<function>_1``, ``<function>_2``,
  ... (``linear``, ``linear_1``); top-level calls and declarations are numbered within the
  current *naming epoch* (below);
* a declaration made again in the same scope instance is numbered the same way (``w``,
  ``w_1``); scope and declaration segments share one namespace per scope instance (a
  segment already taken gets the next free number), and '.', '/' and '#' in a label
  become '_', so full names never collide within an epoch;
* optimizer state declared for a parameter `p` (`state_code(p, ...)`) is named
  ``"<p.name>/<declaration>"``, e.g. ``"mlp.linear.w/adam_m"``, numbered per parameter
  object (a second optimizer over `p` declares ``adam_m_1``; a rebuilt `p` of the same name
  starts again at ``adam_m``);
* any other tensor (operation results, constants) is named ``"<scope path>.<label>#<k>"``,
  k counting such tensors in the scope instance (at top level across the process, e.g.
  ``"add#3"``); these never take a declaration's number, so adding an operation renames no
  parameter.

Naming epochs: the top level (the root scope) starts afresh whenever the user's code
creates an `oc.Context` (`new_epoch`; contexts this library creates for itself, as the
default context, do not). Building the same model again after creating a fresh context
(re-running a notebook cell) gives the same names, so a checkpoint of the first build
loads into the second by name. Two tensors of different epochs can share a name; a
context that holds both renumbers the later one's top segment (`renumbered`), so names
are unique within a context.

Names depend only on the order of calls, declarations and context creations, so the same
program gives the same names in every process.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import weakref
from _thread import allocate_lock  # threading.Lock, without importing threading
from collections.abc import Callable, Container, Iterator
from contextvars import ContextVar
from typing import Any, TypeVar

R = TypeVar("R")

_lock = allocate_lock()
_UNSAFE = re.compile(r"[./#\s]")


def segment(label: str) -> str:
    """A label as one name segment: '.', '/', '#' and spaces become '_' (never empty)."""
    return _UNSAFE.sub("_", label) or "_"


class Scope:
    """One scope instance: its full path and the segments taken inside it."""

    __slots__ = ("_auto", "_counts", "_taken", "owner", "path", "sep")

    def __init__(self, path: str, sep: str = ".", owner: Any = None) -> None:
        self.path = path
        self.sep = sep  #: between the path and a child segment
        self.owner = owner  #: a state scope's parameter (weakly), else None
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


_root_auto = itertools.count()  #: top-level auto names: unique across epochs


def _fresh_root() -> Scope:
    root = Scope("")
    root._auto = _root_auto
    return root


_root = _fresh_root()  #: the current epoch's top level
_current: ContextVar[Scope | None] = ContextVar("name_scope", default=None)
#: id(param) -> the scope of its optimizer state (removed when the param is collected)
_states: dict[int, Scope] = {}
_owned: dict[int, weakref.WeakSet[Any]] = {}  #: id(param) -> its state nodes
_state_names: dict[str, Scope] = {}  #: state scopes of params given by name (this epoch)


def new_epoch() -> None:
    """Start a naming epoch: the top level forgets its taken names (`oc.Context()`)."""
    global _root
    with _lock:
        _root = _fresh_root()
        _state_names.clear()


def _scope() -> Scope:
    cur = _current.get()
    return _root if cur is None else cur


@contextlib.contextmanager
def scope(name: str) -> Iterator[None]:
    """Declarations inside are named under a fresh instance of scope `name` (an @op call)."""
    outer = _scope()  # a scope inside a param's state scope declares its state too
    tok = _current.set(Scope(outer.child(name), owner=outer.owner))
    try:
        yield
    finally:
        _current.reset(tok)


def _state_scope(param: Any) -> Scope:
    """The (persistent) scope of `param`'s optimizer state, its path `param`'s current name:
    keyed by the param object, or by name for a param given as a str."""
    with _lock:
        if isinstance(param, str):
            st = _state_names.get(param)
            if st is None:
                st = _state_names[param] = Scope(param, "/")
            return st
        key = id(param)
        st = _states.get(key)
        if st is None:
            st = _states[key] = Scope(param.name, "/", weakref.ref(param))
            weakref.finalize(param, _states.pop, key, None)
            weakref.finalize(param, _owned.pop, key, None)
        st.path = param.name  # follows a rename (`renumbered`)
        return st


@contextlib.contextmanager
def state_of(param: Any) -> Iterator[None]:
    """Declarations inside are optimizer state of `param` (a tensor, or a parameter's name):
    ``"<param.name>/<declaration>"``, numbered per parameter."""
    tok = _current.set(_state_scope(param))
    try:
        yield
    finally:
        _current.reset(tok)


def state_code(param: Any, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
    """`fn(*args, **kwargs)` (an optimizer's @cd step for `param`) with the nodes it
    declares named as `param`'s state: ``"<param.name>/<declaration>"``."""
    with state_of(param):
        return fn(*args, **kwargs)


def note_state(node: Any) -> None:
    """Record `node` (just declared) as optimizer state of the current state scope's
    parameter, if any (`states_of`): a rename of the parameter renames its state."""
    owner = _scope().owner
    param = owner() if owner is not None else None
    if param is not None:
        with _lock:
            _owned.setdefault(id(param), weakref.WeakSet()).add(node)


def states_of(param: Any) -> list[Any]:
    """The live optimizer-state nodes declared for `param` (`note_state`)."""
    with _lock:
        return list(_owned.get(id(param), ()))


def renumbered(name: str, taken: Container[str]) -> str:
    """`name` with its top segment numbered (``"mlp.linear.w"`` -> ``"mlp_1.linear.w"``,
    ``"w/adam_m"`` -> ``"w_1/adam_m"``), the first number that is not in `taken`."""
    cut = min((i for i in (name.find("."), name.find("/")) if i >= 0), default=len(name))
    head, rest = name[:cut], name[cut:]
    k = 1
    while f"{head}_{k}{rest}" in taken:
        k += 1
    return f"{head}_{k}{rest}"


def declare(label: str) -> str:
    """The unique name of a declaration (param, term, node) made now."""
    return _scope().child(label)


def auto(label: str) -> str:
    """The unique name of an undeclared tensor (an operation result, a constant)."""
    return _scope().auto(label)


_IDENTIFIERS: dict[str, str] = {}  #: label -> identifier (hot: every buffer of every compile)


def identifier(label: str) -> str:
    """A C-safe identifier for a tensor label (memoized).
    Example: ``identifier("0.5") == "t_0_5"``."""
    if (hit := _IDENTIFIERS.get(label)) is not None:
        return hit
    if len(_IDENTIFIERS) >= 1 << 14:  # bounded: a long session's labels
        _IDENTIFIERS.clear()
    s = re.sub(r"\W", "_", label)
    _IDENTIFIERS[label] = out = s if s and not s[0].isdigit() else f"t_{s}"
    return out
