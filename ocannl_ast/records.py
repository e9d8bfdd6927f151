"""`@record`: `@dataclass(frozen=True, slots=True)` for the IR nodes and other records,
cheaper to create at import time (import stage; input a class body, output the class).

`dataclasses` compiles six functions per frozen class with `exec` (__init__, __repr__,
__eq__, __hash__, __setattr__, __delattr__): about 0.7 ms a class, most of
`import ocannl_ast` over its hundred records. Here `dataclasses` still reads the fields and
builds the slotted class (`__dataclass_fields__`, `__match_args__`, `fields`, `replace`,
`is_dataclass` as before), with no generated method; the methods are closures over the
fields (equality and hashing on the same tuples as `dataclasses`' own, so hashes and
comparisons are unchanged) and `__init__` comes from one compiled template per field
layout, writing the slots through their descriptors. A class that uses what the fast path
does not cover (an inherited dataclass, `default_factory`, `init=False`, `__post_init__`,
`kw_only`, an `InitVar`) goes to `dataclasses` unchanged.
"""

from __future__ import annotations

import builtins
import dataclasses
import reprlib
import types
from collections.abc import Callable
from operator import attrgetter
from typing import Any, TypeVar, dataclass_transform, overload

__all__ = ["record"]

T = TypeVar("T")

#: compiled `__init__` factories, by the source of their template
_INIT_FACTORIES: dict[str, Callable[..., Any]] = {}
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
        new.__init__ = _first_init(new, fields)
    if "__repr__" not in own:
        new.__repr__ = _repr(tuple(f.name for f in fields if f.repr))
    if eq and "__eq__" not in own:
        new.__eq__ = _eq(_tuple_getter(tuple(f.name for f in fields if f.compare)))
    class_hash = own.get("__hash__", dataclasses.MISSING)
    explicit_hash = not (class_hash is dataclasses.MISSING
                         or (class_hash is None and "__eq__" in own))
    if eq and not explicit_hash:
        hashed = tuple(f.name for f in fields if (f.compare if f.hash is None else f.hash))
        new.__hash__ = _hash(_tuple_getter(hashed))
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


def _first_init(cls: Any, fields: tuple[dataclasses.Field[Any], ...]
                ) -> Callable[..., None]:
    """A stand-in `__init__` that compiles the real one at the class's first instance and
    puts it in its place (most records of a process are never built: no compile for them).
    `inspect.signature` reads the real one's through `__wrapped__`."""
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        _installed_init(cls, fields)(self, *args, **kwargs)
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    __init__.__wrapped__ = _InitSignature(cls, fields)  # type: ignore[attr-defined]
    return __init__


def _installed_init(cls: Any, fields: tuple[dataclasses.Field[Any], ...]
                    ) -> Callable[..., None]:
    init = cls.__dict__["__init__"]
    if isinstance(getattr(init, "__wrapped__", None), _InitSignature):
        init = cls.__init__ = _init(cls, fields)
    return init  # type: ignore[no-any-return]


class _InitSignature:
    """What a stand-in `__init__` wraps: asking for its signature compiles the real one."""

    __slots__ = ("cls", "fields")

    def __init__(self, cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> None:
        self.cls, self.fields = cls, fields

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        _installed_init(self.cls, self.fields)(*args, **kwargs)

    @property
    def __signature__(self) -> Any:
        import inspect

        return inspect.signature(_installed_init(self.cls, self.fields))


def _init(cls: type, fields: tuple[dataclasses.Field[Any], ...]) -> Callable[..., None]:
    params, body, args = [], [], []
    for i, f in enumerate(fields):
        if f.default is dataclasses.MISSING:
            params.append(f.name)
        else:
            params.append(f"{f.name}=__d{i}")
            args.append(f"__d{i}")
        body.append(f"        __s{i}(self, {f.name})")
    setters = [f"__s{i}" for i in range(len(fields))]
    src = (f"def __factory({', '.join(setters + args)}):\n"
           f"    def __init__(self, {', '.join(params)}):\n"
           + ("\n".join(body) if body else "        pass") + "\n"
           "    return __init__\n")
    factory = _INIT_FACTORIES.get(src)
    if factory is None:
        module = compile(src, f"<record __init__ {len(fields)}>", "exec")
        code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
        factory = _INIT_FACTORIES[src] = types.FunctionType(code, _GLOBALS, "__factory")
    values = [getattr(cls, f.name).__set__ for f in fields]
    values += [f.default for f in fields if f.default is not dataclasses.MISSING]
    init: Callable[..., None] = factory(*values)
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = {f.name: f.type for f in fields} | {"return": None}
    return init


def _tuple_getter(names: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The tuple `dataclasses`' generated __eq__ / __hash__ build: (self.a, self.b, ...)."""
    if len(names) >= 2:
        return attrgetter(*names)
    if len(names) == 1:
        one = attrgetter(names[0])
        return lambda obj: (one(obj),)
    return lambda obj: ()


def _repr(names: tuple[str, ...]) -> Callable[[Any], str]:
    @reprlib.recursive_repr()
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n in names)
        return f"{self.__class__.__qualname__}({inner})"
    return __repr__


def _eq(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any, Any], Any]:
    def __eq__(self: Any, other: Any) -> Any:
        if other.__class__ is self.__class__:
            return key(self) == key(other)
        return NotImplemented
    return __eq__


def _hash(key: Callable[[Any], tuple[Any, ...]]) -> Callable[[Any], int]:
    def __hash__(self: Any) -> int:
        return hash(key(self))
    return __hash__


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
