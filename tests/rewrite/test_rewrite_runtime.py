# Dialect code (@op/@cd bodies) reads names that only exist after rewriting:
# ruff: noqa: F821, F841
# mypy: disable-error-code="name-defined, operator, index, misc, attr-defined"
"""Decorated functions run against a fake builder namespace (no ocannl_ast.tensor).

Checks: bodies run, closures and globals resolve (late-bound globals included), tracebacks
and co_firstlineno point at the user's lines, the per-function cache, hoisting shares
declarations across calls of a returned lambda, and @cd collects assignments in order.
"""

from __future__ import annotations

import inspect
import linecache
import re
import sys
import traceback
import types
from typing import Any

import pytest

from ocannl_ast.rewrite import LazyBuilders, cache_size, make_decorator
from ocannl_ast.rewrite.decorator import rewritten


class T:
    """A fake tensor: operators build a readable expression string."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _bin(self, op: str, other: Any, flip: bool = False) -> T:
        a, b = (other, self) if flip else (self, other)
        return T(f"({a!r} {op} {b!r})")

    def __add__(self, o: Any) -> T:
        return self._bin("+", o)

    def __radd__(self, o: Any) -> T:
        return self._bin("+", o, True)

    def __mul__(self, o: Any) -> T:
        return self._bin("*", o)

    def __rmul__(self, o: Any) -> T:
        return self._bin("*", o, True)

    def __matmul__(self, o: Any) -> T:
        return self._bin("@", o)

    def __sub__(self, o: Any) -> T:
        return self._bin("-", o)


class Collector:
    def __init__(self, log: list[Any]) -> None:
        self.items: list[Any] = []
        self.log = log

    def add(self, item: Any) -> None:
        self.items.append(item)

    def include(self, value: Any) -> None:
        if isinstance(value, list):
            self.items.extend(value)

    def result(self) -> list[Any]:
        return self.items


class Fake:
    """Records every builder call; returns fake tensors and tuples."""

    def __init__(self) -> None:
        self.log: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.spans: list[tuple[str, Any, Any]] = []  # (builder, what, span=) of every call

    def _rec(self, name: str, *args: Any, **kwargs: Any) -> None:
        self.log.append((name, args, kwargs))

    def param(self, name: str, *, span: Any = None, **kw: Any) -> T:
        self.spans.append(("param", name, span))
        self._rec("param", name, **kw)
        return T(f"{name}#{sum(1 for c in self.log if c[0] == 'param')}")

    def node(self, name: str, *, span: Any = None, **kw: Any) -> T:
        self.spans.append(("node", name, span))
        self._rec("node", name, **kw)
        return T(name)

    def literal(self, values: Any) -> T:
        self._rec("literal", values)
        return T(f"lit{values!r}")

    def batch(self, values: Any) -> tuple[str, Any]:
        return ("batch", values)

    def einsum(self, spec: str, *ops: Any, span: Any = None) -> T:
        self.spans.append(("einsum", spec, span))
        self._rec("einsum", spec, *ops)
        return T(f"einsum({spec!r})")

    def einsum_max(self, spec: str, *ops: Any, span: Any = None) -> T:
        self.spans.append(("einsum_max", spec, span))
        self._rec("einsum_max", spec, *ops)
        return T(f"einsum_max({spec!r})")

    def concat(self, spec: str, *ops: Any, span: Any = None) -> T:
        self.spans.append(("concat", spec, span))
        return T(f"concat({spec!r})")

    def code_collector(self) -> Collector:
        return Collector([])

    def accum(self, target: Any, op: str, rhs: Any, *, span: Any = None,
              **kw: Any) -> tuple[Any, ...]:
        self.spans.append(("accum", op, span))
        return (repr(target), op, rhs, tuple(sorted(kw.items())))

    def prim(self, name: str, *args: Any) -> tuple[Any, ...]:
        return (name, *map(repr, args))

    def grad_of(self, t: Any) -> T:
        return T(f"{t!r}.grad")

    def value_of(self, t: Any) -> T:
        return T(f"{t!r}.value")


FAKE = Fake()
op = make_decorator("op", FAKE)
cd = make_decorator("cd", FAKE)


def relu(x: Any) -> T:
    return T(f"relu({x!r})")


@op
def mlp_layer(hid_dim: int) -> Any:
    """An MLP layer; its params are minted once per mlp_layer call."""
    return lambda x: relu({w} @ x + {b, o := [hid_dim]})


@op
def uses_late_global(x: T) -> T:
    return x + LATE_GLOBAL  # defined below, after decoration


LATE_GLOBAL = T("late")


@op
def raises_inside(x: T) -> T:
    y = x + {w}
    raise ValueError(f"boom {y!r}")  # MARK-RAISE


@op
def loops_and_lambdas(xs: list[T]) -> list[T]:
    out = []
    for x in xs:
        out.append({w} @ x)
    fs = [lambda y: {v} * y for _ in range(3)]
    return out + [f(x) for f in fs for x in xs]


@op
def strided(x: T, w: T, s: int) -> T:
    out[o] = sum[k](x[s*o + k] * w[k])
    return out


@op
def with_defaults(x: T, scale: float = 2.0, *, shift: float = 1.0) -> T:
    return scale * x + shift


@cd
def sgd(p: T, lr: float, momentum: float = 0.0) -> Any:
    {delta}[...] = p.grad + 0.0 * p
    if momentum > 0.0:
        {mom}[...] = momentum * mom + delta
    p -= lr * delta


@cd
def calls_sgd(ps: list[T]) -> Any:
    for p in ps:
        sgd(p, 0.1)


@cd
def multiline(v: T, a: T, b: T) -> Any:
    v[...] = add(
        a,
        b)
    ratio = 1 / 0  # MARK-ZERO
    print(ratio)


def explode() -> float:
    raise KeyError("init")


@op
def bad_init(x: T) -> T:
    y = x + 1.0
    return y @ {w := explode()}  # MARK-INIT


class Layer:
    @op
    def method(self, x: T) -> T:
        return {w} @ x


class Base:
    def describe(self) -> str:
        return "base"


class Derived(Base):
    @op
    def describe(self) -> Any:
        self.__hidden = {w}
        return super().describe(), self.__hidden, self._Derived__hidden


def _params(since: int) -> list[tuple[str, tuple[Any, ...], dict[str, Any]]]:
    return [c for c in FAKE.log[since:] if c[0] == "param"]


def test_decorated_function_keeps_identity() -> None:
    assert mlp_layer.__name__ == "mlp_layer"
    assert mlp_layer.__doc__ and mlp_layer.__doc__.startswith("An MLP layer")
    wrapped = mlp_layer.__wrapped__  # type: ignore[attr-defined]
    assert isinstance(wrapped, types.FunctionType)
    assert "{w} @ x" in inspect.getsource(mlp_layer)
    assert inspect.getsource(wrapped) == inspect.getsource(mlp_layer)


def test_hoisting_shares_params_across_lambda_applications() -> None:
    start = len(FAKE.log)
    layer = mlp_layer(8)
    assert [c[1][0] for c in _params(start)] == ["w", "b"]
    assert _params(start)[1][2] == {"output_dims": [8]}
    first, second = layer(T("x1")), layer(T("x2"))
    assert len(_params(start)) == 2, "applying the layer mints nothing new"
    assert repr(first).replace("x1", "x2") == repr(second)
    assert re.findall(r"\w#\d+", repr(first)) == re.findall(r"\w#\d+", repr(second))
    mlp_layer(4)
    assert len(_params(start)) == 4, "a second mlp_layer call mints its own params"


def test_hoisting_out_of_loops_and_lambdas() -> None:
    start = len(FAKE.log)
    out = loops_and_lambdas([T("a"), T("b")])
    assert [c[1][0] for c in _params(start)] == ["w", "v"]
    assert len(out) == 2 + 6


def test_globals_resolve_late_and_closures_work() -> None:
    assert repr(uses_late_global(T("x"))) == "(x + late)"

    scale = T("s")

    @op
    def closure(x: T) -> T:
        return x * scale

    assert repr(closure(T("x"))) == "(x * s)"
    scale = T("changed")  # the closure cell sees the new value
    assert repr(closure(T("x"))) == "(x * changed)"


def test_nonlocal_in_nested_function() -> None:
    def outer() -> Any:
        count = 0

        @op
        def bump(x: T) -> T:
            nonlocal count
            count += 1
            return x

        bump(T("x"))
        bump(T("y"))
        return count

    assert outer() == 2


def test_traceback_points_at_user_line() -> None:
    with pytest.raises(ValueError) as info:
        raises_inside(T("x"))
    frame = traceback.extract_tb(info.value.__traceback__)[-1]
    src, first = inspect.getsourcelines(raises_inside)
    expected = first + next(k for k, line in enumerate(src) if "MARK-RAISE" in line)
    assert frame.filename == __file__
    assert frame.lineno == expected
    assert frame.line is not None and "MARK-RAISE" in frame.line


def test_code_object_positions() -> None:
    code = rewritten(raises_inside).__code__
    orig = raises_inside.__wrapped__.__code__  # type: ignore[attr-defined]
    assert code.co_filename == orig.co_filename
    src, first = inspect.getsourcelines(raises_inside)
    assert code.co_firstlineno == first + 1  # the `def` line (the decorator is stripped)
    lines = {ln for _, _, ln in code.co_lines() if ln is not None}
    assert lines <= set(range(first, first + len(src)))


def test_per_function_cache() -> None:
    def factory() -> Any:
        @op
        def made(x: T) -> T:
            return {w} @ x

        return made

    factory()
    size = cache_size()
    f2 = factory()
    assert cache_size() == size, "re-decorating the same code hits the cache"
    start = len(FAKE.log)
    f2(T("x"))
    assert [c[1][0] for c in _params(start)] == ["w"]


def test_named_index_spec_is_built_at_run_time() -> None:
    start = len(FAKE.log)
    strided(T("x"), T("w"), 2)
    strided(T("x"), T("w"), 3)
    specs = [c[1][0] for c in FAKE.log[start:] if c[0] == "einsum"]
    assert specs == ["2*o+k,;k,=>o,", "3*o+k,;k,=>o,"]


def test_defaults_and_kwdefaults_are_kept() -> None:
    assert repr(with_defaults(T("x"))) == "((2.0 * x) + 1.0)"
    assert with_defaults.__kwdefaults__ == {"shift": 1.0}
    assert repr(with_defaults(T("x"), 3.0, shift=0.0)) == "((3.0 * x) + 0.0)"


def test_cd_collects_assignments_in_order() -> None:
    items = sgd(T("p"), 0.5)
    assert [i[1] for i in items] == ["=:", "=-"]
    assert items[0][0] == "delta" and items[0][2][0] == "add"
    assert items[1] == ("p", "=-", ("mul", "0.5", "delta"), ())
    with_momentum = sgd(T("p"), 0.5, momentum=0.9)
    assert [i[0] for i in with_momentum] == ["delta", "mom", "p"]


def test_cd_call_statements_include_code() -> None:
    items = calls_sgd([T("p"), T("q")])
    assert [i[0] for i in items] == ["delta", "p", "delta", "q"]


def test_methods_are_rewritten() -> None:
    start = len(FAKE.log)
    assert "@ x" in repr(Layer().method(T("x")))
    assert _params(start)[0][1] == ("w",)  # a param declared in the method, by its name


def test_lazy_builders_resolve_on_first_use() -> None:
    mod = types.ModuleType("fake_dsl_for_rewrite_tests")
    mod.param = lambda name, **kw: T(f"lazy-{name}")  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    try:
        lazy_op = make_decorator("op", mod.__name__)

        @lazy_op
        def f(x: T) -> T:
            return {w} @ x

        assert repr(f(T("x"))) == "(lazy-w @ x)"
        assert isinstance(LazyBuilders(mod.__name__).param, types.LambdaType)
    finally:
        del sys.modules[mod.__name__]


def test_unknown_dialect_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        make_decorator("xx", FAKE)  # type: ignore[arg-type]


def _last_user_frame(
    exc: BaseException, marker: str, fn: Any
) -> tuple[traceback.FrameSummary, int]:
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.name == fn.__name__]
    src, first = inspect.getsourcelines(fn)
    expected = first + next(k for k, line in enumerate(src) if marker in line)
    return frames[-1], expected


def test_multiline_statement_keeps_following_lines_and_columns() -> None:
    with pytest.raises(ZeroDivisionError) as info:
        multiline(T("v"), T("a"), T("b"))
    frame, expected = _last_user_frame(info.value, "MARK-ZERO", multiline)
    assert frame.lineno == expected
    raw = linecache.getline(__file__, expected)
    col = raw.index("1 / 0")
    assert (frame.colno, frame.end_colno) == (col, col + len("1 / 0"))


def test_error_in_hoisted_declaration_points_at_the_declaration() -> None:
    with pytest.raises(KeyError) as info:
        bad_init(T("x"))
    frame, expected = _last_user_frame(info.value, "MARK-INIT", bad_init)
    assert frame.lineno == expected


def test_methods_keep_super_and_private_name_mangling() -> None:
    parent, hidden, mangled = Derived().describe()
    assert parent == "base" and hidden is mangled
