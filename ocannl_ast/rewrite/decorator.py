"""Decorator entry points: `make_decorator("op" | "cd", builders)` and `rewrite_source`.

Input: a user function (or source text). Output: a new function compiled from the rewritten
source, running with `__oc__` bound to the builder namespace; or the rewritten source text.
Rewrites are cached per code object in memory and on disk (`cache`); only a miss imports
`rewriter` (and with it libcst). This is the single place where unexpected internal
exceptions become a located DslSyntaxError (`OCANNL_AST_DEBUG=1` re-raises them raw).
"""

from __future__ import annotations

import builtins
import functools
import importlib
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal, TypeVar

from ocannl_ast import config
from ocannl_ast.errors import DslSyntaxError, Span, user_span
from ocannl_ast.rewrite.contract import OC, REDUCER_ACCUM, SPANS
from ocannl_ast.rewrite.source import check_function, key_source, read_source, unreadable

F = TypeVar("F", bound=Callable[..., Any])
Kind = Literal["op", "cd"]
_KINDS = ("op", "cd")
_CACHE: dict[tuple[str, str, str, types.CodeType], tuple[types.CodeType, tuple[Span, ...]]] = {}


def rewrite_source(
    src: str, kind: Kind, qualname: str, *, filename: str = "<string>", first_line: int = 1
) -> str:
    """The rewritten text of the one decorated `def` in `src` (pure; for golden tests).

    Example: ``rewrite_source("@op\\ndef f(x):\\n    return {w} @ x\\n", "op", "f")`` returns
    ``'def f(x):\\n    w = __oc__.param("w")\\n    return w @ x\\n'``.
    """
    from ocannl_ast.rewrite import rewriter

    return rewriter.rewrite_source(src, kind, qualname, filename=filename,
                                   first_line=first_line)


class LazyBuilders:
    """A builder namespace imported on first use: `make_decorator("op", LazyBuilders("m"))`.

    Lets a module that itself uses @op/@cd (ocannl_ast.tensor) provide the builders without
    an import cycle.
    """

    __slots__ = ("_path", "_target")

    def __init__(self, path: str) -> None:
        self._path = path
        self._target: object | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.resolved(), name)

    def resolved(self) -> object:
        """The builder module itself (imported now if it was not yet)."""
        if self._target is None:
            self._target = importlib.import_module(self._path)
        return self._target


class _DialectGlobals(dict[str, Any]):
    """Globals of a rewritten function: `__oc__` here, every other name read live from the
    defining module (so names defined after decoration still resolve)."""

    def __init__(self, module_globals: dict[str, Any], namespace: object, kind: str,
                 spans: tuple[Span | None, ...]) -> None:
        super().__init__(
            {
                OC: namespace,
                SPANS: spans,
                "__builtins__": module_globals.get("__builtins__", builtins),
                "__name__": module_globals.get("__name__"),
            }
        )
        self._module_globals = module_globals
        self._kind = kind

    def __missing__(self, key: str) -> Any:
        try:
            return self._module_globals[key]
        except KeyError:
            functions = getattr(self[OC], "dialect_functions", None)
            if not isinstance(functions, Mapping):
                functions = None
            if functions is not None and key in functions:
                return functions[key]  # sqrt, where, sign, ...: no import needed
            b = self["__builtins__"]
            if key in (b if isinstance(b, dict) else vars(b)):
                raise  # the interpreter reads the builtin
            known = [*self._module_globals, *(functions or ()),
                     *(b if isinstance(b, dict) else vars(b))]
            raise undefined_name(key, self._kind, known) from None


#: Names users reach for when they mean a reduction (the hint about the dialect's reducers
#: is given for these only).
REDUCER_LIKE = frozenset({
    "mean", "avg", "average", "std", "var", "variance", "logsumexp", "argmax", "argmin",
    "norm", "amax", "amin", "reduce", "cumsum", "cumprod", "total", "sum_", "prod_", "max_",
    "min_", "reduce_sum", "reduce_mean", "reduce_max", "reduce_min",
})


def undefined_name(name: str, kind: str, known: Iterable[str] = ()) -> DslSyntaxError:
    """The located error for a name that neither the body, the module, the dialect's
    functions nor builtins define: for a reducer-like name (`mean`), the reducers the dialect
    has; otherwise close spellings among `known` names, and how state is declared."""
    if name in REDUCER_LIKE:
        if kind == "cd":
            hint = ("the @cd reducers of a whole right-hand side are " + ", ".join(REDUCER_ACCUM)
                    + " (`v[...] = sum(e)`; named: `y[i] = sum[j](x[i, j])`)")
        else:
            hint = ("@op reduces with oc.einsum / oc.einsum_max specs or named indices "
                    "(`y[i] = sum[j](x[i, j])`, also max[j])")
    else:
        import difflib  # only for this error's hint

        close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.75)
        hint = f"did you mean {' or '.join(close)}? " if close else ""
        hint += (f"if it is a node of this function, declare it where it is first written, "
                 f"`{{{name}}}[...] = e`, before any read" if kind == "cd" else
                 f"if it is a parameter of this function, declare it inline: `{{{name}}}`")
    return DslSyntaxError(f"name '{name}' is not defined in this @{kind} function; {hint}",
                          user_span())


def _compiled(fn: types.FunctionType, kind: str) -> tuple[types.CodeType, tuple[Span, ...]]:
    code = fn.__code__
    key = (kind, fn.__qualname__, code.co_filename, code)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    # keyed on the lines the code covers (no tokenizing: a warm import reads no more);
    # a miss reads the whole block for the rewriter
    from ocannl_ast.rewrite import cache  # hashlib: at the first build, not at import

    keyed = key_source(fn) or read_source(fn, kind)
    disk_key = cache.entry_key(keyed.text, keyed.filename, keyed.first_line, kind,
                               fn.__qualname__, fn.__name__, code.co_freevars, code.co_flags)
    found = cache.load(disk_key) if disk_key is not None else None
    if found is None:
        from ocannl_ast.rewrite import rewriter

        found = rewriter.rewrite_function(fn, read_source(fn, kind), kind)
        if disk_key is not None:
            cache.store(disk_key, *found)
    _CACHE[key] = found
    return found


def _decorate(fn: object, kind: str, namespace: object) -> types.FunctionType:
    func = check_function(fn, kind)
    if _own(func):
        return _deferred(func, kind, namespace)
    return _build(func, kind, namespace)


def _own(func: types.FunctionType) -> bool:
    """A function of this library (not a user's)."""
    return (func.__module__ or "").split(".")[0] == __name__.split(".")[0]


def _build(func: types.FunctionType, kind: str, namespace: object) -> types.FunctionType:
    new_code, spans = _compiled(func, kind)
    # The library's own dialect functions (op_asn/grad_asn of built-in operations) report
    # their errors at the user's call that built the operation, not at their own lines.
    own = _own(func)
    table: tuple[Span | None, ...] = (None,) * len(spans) if own else spans
    if own and isinstance(namespace, LazyBuilders):
        # built at its first call (`_deferred`): the package is loaded by then, so its
        # body reads the builder module directly, not through `__getattr__` (hot)
        namespace = namespace.resolved()
    cells = dict(zip(func.__code__.co_freevars, func.__closure__ or (), strict=True))
    closure = tuple(cells[name] for name in new_code.co_freevars)
    new_fn = types.FunctionType(
        new_code, _DialectGlobals(func.__globals__, namespace, kind, table), func.__name__,
        func.__defaults__, closure,
    )
    new_fn.__kwdefaults__ = dict(func.__kwdefaults__) if func.__kwdefaults__ else None
    functools.update_wrapper(new_fn, func)
    return _scoped(new_fn, namespace) if kind == "op" else new_fn


#: the library's own @op/@cd functions not called yet (their rewrites are not loaded)
_DEFERRED: list[Callable[[], types.FunctionType]] = []


def _deferred(func: types.FunctionType, kind: str, namespace: object) -> types.FunctionType:
    """The library's own functions are rewritten (read from the rewrite cache, on a warm
    one) at their first call rather than at `import ocannl_ast`: most programs call few of
    them. The stand-in calls the built function; `rewritten` reaches it."""
    built: list[types.FunctionType] = []

    def materialize() -> types.FunctionType:
        if not built:
            built.append(_guarded(func, kind, lambda: _build(func, kind, namespace)))
        return built[0]

    def call(*args: Any, **kwargs: Any) -> Any:
        return (built[0] if built else materialize())(*args, **kwargs)

    functools.update_wrapper(call, func)
    call.__materialize__ = materialize  # type: ignore[attr-defined]
    _DEFERRED.append(materialize)
    return call  # type: ignore[return-value]


def materialize_deferred() -> int:
    """Build every library @op/@cd function not built yet (tests; warming the rewrite
    cache); how many there are in all."""
    for materialize in _DEFERRED:
        materialize()
    return len(_DEFERRED)


def _scoped(fn: types.FunctionType, namespace: object) -> types.FunctionType:
    """An @op function whose every call runs in a fresh name scope named after it (the
    builders' `name_scope(name)`, when they offer one): declarations inside are named
    `"<function>.<declaration>"` (`ocannl_ast.naming`)."""
    name = fn.__name__

    def call(*args: Any, **kwargs: Any) -> Any:
        name_scope = getattr(namespace, "name_scope", None)
        if name_scope is None:
            return fn(*args, **kwargs)
        with name_scope(name):
            return fn(*args, **kwargs)

    functools.update_wrapper(call, fn)
    call.__wrapped__ = fn.__wrapped__  # type: ignore[attr-defined]  # the user's function
    call.__rewritten__ = fn  # type: ignore[attr-defined]  # its rewritten code runs here
    call.__kwdefaults__ = fn.__kwdefaults__
    return call  # type: ignore[return-value]


def rewritten(fn: Any) -> types.FunctionType:
    """The function compiled from the rewritten source of a decorated function (an @op
    function's call wrapper holds it as `__rewritten__`; a @cd function is it)."""
    materialize = getattr(fn, "__materialize__", None)
    if materialize is not None:
        fn = materialize()
    return getattr(fn, "__rewritten__", fn)  # type: ignore[no-any-return]


def make_decorator(kind: Kind, builders: object) -> Callable[[F], F]:
    """The `@op` or `@cd` decorator whose rewritten bodies call `builders` as `__oc__`.

    Example: ``op = make_decorator("op", ocannl_ast.tensor.dsl)``; a str is a module path
    imported lazily (see LazyBuilders).
    """
    if kind not in _KINDS:
        raise ValueError(f"unknown dialect {kind!r}; expected 'op' or 'cd'")
    namespace = LazyBuilders(builders) if isinstance(builders, str) else builders

    def decorator(fn: F) -> F:
        built = _guarded(fn, kind, lambda: _decorate(fn, kind, namespace))
        return built  # type: ignore[return-value]

    decorator.__name__ = decorator.__qualname__ = kind
    decorator.__doc__ = f"Rewrite the body of a function written in the @{kind} dialect."
    return decorator


def _guarded(fn: object, kind: str, build: Callable[[], types.FunctionType]
             ) -> types.FunctionType:
    """`build()`, with any unexpected exception turned into a located DslSyntaxError (the
    raw one under OCANNL_AST_DEBUG=1)."""
    try:
        return build()
    except DslSyntaxError as exc:
        if config.debug():
            raise
        raise exc.with_traceback(None) from None
    except Exception as exc:
        if config.debug():
            raise
        name = getattr(fn, "__qualname__", repr(fn))
        raise unreadable(
            fn,
            f"internal error while rewriting @{kind} function {name}: "
            f"{type(exc).__name__}: {exc} (set OCANNL_AST_DEBUG=1 for the raw traceback)",
        ) from exc


def clear_cache() -> None:
    """Forget every compiled rewrite (tests; reloading edited sources)."""
    _CACHE.clear()


def cache_size() -> int:
    """How many functions have a cached rewrite."""
    return len(_CACHE)
