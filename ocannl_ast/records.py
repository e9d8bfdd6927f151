"""`@record`: `@dataclass(frozen=True, slots=True)` for the IR nodes and other records,
cheaper to create at import time (import stage; input a class body, output the class).

`dataclasses` compiles six functions per frozen class with `exec` (__init__, __repr__,
__eq__, __hash__, __setattr__, __delattr__): about 0.7 ms a class, most of
`import ocannl_ast` over its hundred records. Here `dataclasses` still reads the fields and
builds the slotted class (`__dataclass_fields__`, `__match_args__`, `fields`, `replace`,
`is_dataclass` as before), with no generated method. `__init__`, `__eq__` and `__hash__`
are the code `dataclasses` would generate (equality and hashes on the same tuples, so
unchanged), compiled once per field count with placeholder names renamed after each
class's fields; `__init__` writes the slots through their descriptors (faster than
`object.__setattr__` too). `__repr__` and the frozen `__setattr__` / `__delattr__` are
closures over the fields. A class that uses what the fast path
does not cover (an inherited dataclass, `default_factory`, `init=False`, `__post_init__`,
`kw_only`, an `InitVar`) goes to `dataclasses` unchanged.
"""

from __future__ import annotations

import builtins
import dataclasses
import reprlib
import types
from collections.abc import Callable
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["record"]

T = TypeVar("T")

#: the code of `__init__`, `__eq__`, `__hash__` by number of fields, with placeholder names
_TEMPLATES: dict[tuple[str, int], types.CodeType] = {}
_GLOBALS: dict[str, Any] = {"__builtins__": builtins}
_UNSUPPORTED_HOOKS = ("__post_init__", "__setattr__", "__delattr__")


@overload
@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,
                                                            dataclasses.Field))
def record(cls: type[T], /) -> type[T]: ...


@overload
@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,
                                                            dataclasses.Field))
def record(*, eq: bool = True) -> Callable[[type[T]], type[T]]: ...


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,
                                                            dataclasses.Field))
def record(cls: type[T] | None = None, /, *, eq: bool = True
           ) -> type[T] | Callable[[type[T]], type[T]]:
    """`@dataclass(frozen=True, slots=True, eq=eq)` with the same behaviour (see the module
    docstring). Example: `@record class Point: x: int; y: int = 0` then
    `Point(1) == Point(1, 0)` and `dataclasses.replace(Point(1), y=2)`."""
    if cls is None:
        return lambda c: _make(c, eq)
    return _make(cls, eq)


def _make(cls: type[T], eq: bool) -> type[T]:
    if not _fast_path_applies(cls):
        return dataclasses.dataclass(frozen=True, slots=True, eq=eq)(cls)
    own = cls.__dict__
    doc = own.get("__doc__")
    if doc is None:
        cls.__doc__ = "-"  # keeps `dataclasses` from computing one with inspect.signature
    new: Any = dataclasses.dataclass(init=False, repr=False, eq=False, slots=True)(cls)
    fields = dataclasses.fields(new)
    names = tuple(f.name for f in fields)
    if doc is None:
        new.__doc__ = f"{new.__name__}({', '.join(names)})"
    if "__init__" not in own:
        new.__init__ = _init(new, fields)
    if "__repr__" not in own:
        new.__repr__ = _repr(tuple(f.name for f in fields if f.repr))
    if eq and "__eq__" not in own:
        new.__eq__ = _method(new, "__eq__", tuple(f.name for f in fields if f.compare))
    class_hash = own.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING
                         or (class_hash is None and "__eq__" in own))
    if eq and not explicit_hash:
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        new.__hash__ = _method(new, "__hash__", hashed)
    new.__setattr__, new.__delattr__ = _frozen(new, names)
    if "__getstate__" not in own:
        new.__getstate__ = _getstate
    if "__setstate__" not in own:
        new.__setstate__ = _setstate
    params = new.__dataclass_params__
    params.init, params.repr, params.eq, params.frozen = True, True, eq, True
    return new  # type: ignore[no-any-return]


def _fast_path_applies(cls: type) -> bool:
    """Whether the class body uses only what `_make` covers: plain fields with or without
    a default, on a class with no dataclass base and no hook `dataclasses` would call."""
    own = cls.__dict__
    if (any(dataclasses.is_dataclass(b) for b in cls.__mro__[1:]) or "__slots__" in own
            or any(h in own for h in _UNSUPPORTED_HOOKS)):
        return False
    for name, ann in own.get("__annotations__", {}).items():
        text = ann if isinstance(ann, str) else repr(ann)
        if name.startswith("__") or name == "self" or "InitVar" in text or "KW_ONLY" in text:
            return False
        value = own.get(name)
        if isinstance(value, dataclasses.Field) and (
                not value.init or value.kw_only is True
                or value.default_factory is not dataclasses.MISSING):
            return False
    return True


def _init(cls: Any, fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    """`__init__(self, <fields>)`, each slot written through its descriptor, the defaults
    as the function's defaults."""
    names = tuple(f.name for f in fields)
    defaults = tuple(f.default for f in fields if f.default is not dataclasses.MISSING)
    setters = {f"__s{i}": getattr(cls, n).__set__ for i, n in enumerate(names)}
    init = _method(cls, "__init__", names, defaults or None, setters)
    init.__annotations__ = {f.name: f.type for f in fields} | {"return": None}
    return init


def _method(cls: Any, method: str, names: tuple[str, ...], defaults: tuple[Any, ...] | None
            = None, free: dict[str, Any] | None = None) -> Callable[..., Any]:
    """`cls.<method>` over the fields `names`: the template compiled for this many fields,
    its placeholders (`__a<i>` parameters, `__f<i>` attributes) renamed after the fields
    -- no compile per class; `free` gives its free variables' values by name."""
    template = _TEMPLATES.get((method, len(names)))
    if template is None:
        template = _TEMPLATES[method, len(names)] = _compile_template(method, len(names))
    rename = {f"__{'a' if method == '__init__' else 'f'}{i}": n for i, n in enumerate(names)}
    qualname = f"{cls.__qualname__}.{method}"
    code = template.replace(co_varnames=tuple(rename.get(v, v) for v in template.co_varnames),
                            co_names=tuple(rename.get(v, v) for v in template.co_names),
                            co_qualname=qualname)
    cells = tuple(types.CellType(free[v]) for v in code.co_freevars) if free else None
    fn = types.FunctionType(code, _GLOBALS, method, defaults, cells)
    fn.__qualname__ = qualname
    fn.__module__ = cls.__module__
    return fn


def _compile_template(method: str, n: int) -> types.CodeType:
    """The code `dataclasses` would generate for `n` fields, with placeholder names."""
    fs = [f"__f{i}" for i in range(n)]
    if method == "__init__":  # the setters are free variables: compiled inside a factory
        src = (f"def factory({', '.join(f'__s{i}' for i in range(n))}):\n"
               f"    def __init__(self{''.join(f', __a{i}' for i in range(n))}):\n"
               + "".join(f"        __s{i}(self, __a{i})\n" for i in range(n))
               + "        return None\n    return __init__\n")
    elif method == "__eq__":
        mine, theirs = (f"({''.join(f'{who}.{f}, ' for f in fs)})" for who in ("self", "other"))
        src = (f"def __eq__(self, other):\n    if other.__class__ is self.__class__:\n"
               f"        return {mine} == {theirs}\n    return NotImplemented\n")
    else:
        src = f"def __hash__(self):\n    return hash(({''.join(f'self.{f}, ' for f in fs)}))\n"
    code = compile(src, f"<record {method} of {n} fields>", "exec")
    while code.co_name != method:
        code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    return code


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{self.__class__.__qualname__}({inner})"
    return __repr__


def _frozen(cls: Any, names: tuple[str, ...]
            ) -> tuple[Callable[[Any, str, Any], None], Callable[[Any, str], None]]:
    """`dataclasses`' frozen __setattr__ / __delattr__, same messages."""
    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in names:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)
    return __setattr__, __delattr__


def _getstate(self: Any) -> list[Any]:
    """Pickling support of a frozen slotted dataclass, as `dataclasses` adds it."""
    return [getattr(self, f.name) for f in dataclasses.fields(self)]


def _setstate(self: Any, state: list[Any]) -> None:
    for f, value in zip(dataclasses.fields(self), state, strict=False):
        object.__setattr__(self, f.name, value)
