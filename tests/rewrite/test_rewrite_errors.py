"""Malformed @op/@cd bodies: each raises DslSyntaxError at decoration time, located at the
offending text (file, line, column), and nothing but DslSyntaxError ever escapes.

Each corpus case is written to its own module file and imported, so the real decorator path
(inspect.getsource, absolute line numbers) is exercised.
"""

from __future__ import annotations

import functools
import importlib.util
import itertools
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import ocannl_ast.rewrite.rewriter as rewriter_module
from ocannl_ast.errors import DslSyntaxError
from ocannl_ast.rewrite import make_decorator
from ocannl_ast.rewrite.rewriter import rewrite_parsed
from ocannl_ast.rewrite.source import FunctionSource, parse_function


class _Anything:
    def __getattr__(self, name: str) -> Any:
        return lambda *a, **k: None


op = make_decorator("op", _Anything())
cd = make_decorator("cd", _Anything())


@dataclass(frozen=True)
class Case:
    kind: str  #: "op" or "cd"
    name: str  #: test id
    source: str  #: the def (without decorator)
    needle: str  #: text at the expected error position
    fragment: str  #: expected in the message
    occurrence: int = 1  #: which occurrence of the needle


CORPUS = [
    # ---- @op: declarations ----------------------------------------------------------
    Case("op", "duplicate_declaration", "def f(x):\n    return {w} @ x + {w}\n", "{w}",
         "declared twice", 2),
    Case("op", "declaration_in_field", "def f(x):\n    return {b, o := [{h}]} + x\n", "{h}",
         "inside another declaration"),
    Case("op", "declaration_uses_later_local",
         "def f(x):\n    h = 3\n    return {b, o := [h]} + x\n", "h]", "bound in the body"),
    Case("op", "declaration_uses_lambda_param",
         "def f():\n    return lambda d: {b, o := [d]}\n", "d]", "bound in the body"),
    Case("op", "declaration_uses_reassigned_param",
         "def f(h):\n    h = h * 2\n    return {b, o := [h]}\n", "h]", "reassigned"),
    Case("op", "declaration_uses_later_declaration",
         "def f(x):\n    return {a, o := [c]} + {c}\n", "c]", "before `c` is declared"),
    Case("op", "declared_name_also_bound",
         "def f(x):\n    for w in x:\n        pass\n    return {w}\n", "{w}", "also bound"),
    Case("op", "declared_name_is_param", "def f(w):\n    return {w} @ w\n", "{w}",
         "a parameter"),
    Case("op", "declaration_head_not_a_name", "def f(x):\n    return {1.0} + x\n", "1.0",
         "starts with a name"),
    Case("op", "declaration_field_not_walrus", "def f(x):\n    return {w, 3} + x\n", "3}",
         "name := value"),
    Case("op", "declaration_field_twice",
         "def f(x):\n    return {w, o := [1], output_dims := [2]} + x\n", "output_dims",
         "given twice"),
    Case("op", "declaration_starred", "def f(ws):\n    return {*ws}\n", "ws}",
         "starts with a name"),
    # ---- @op: named indices -----------------------------------------------------------
    Case("op", "missing_reducer", "def f(x):\n    y[i] = x[i, j]\n    return y\n", "x[i, j]",
         "did you mean sum[j](...)?"),
    Case("op", "reducer_index_absent",
         "def f(x):\n    y[i] = sum[k](x[i, j])\n    return y\n", "k]", "does not appear"),
    Case("op", "reducer_index_kept",
         "def f(x):\n    y[i, j] = sum[j](x[i, j])\n    return y\n", "j](", "kept on the left"),
    Case("op", "reducer_misses_index",
         "def f(x):\n    y[i] = sum[j](x[i, j, k])\n    return y\n", "sum[j]",
         "not listed in sum[j]"),
    Case("op", "reducer_index_twice",
         "def f(x):\n    y[i] = sum[j, j](x[i, j])\n    return y\n", "j](", "listed twice"),
    Case("op", "prod_in_op", "def f(x):\n    y[i] = prod[j](x[i, j])\n    return y\n",
         "prod[j]", "no `prod` reduction"),
    # an unknown reducer's message lists only the reducers @op takes (not prod, min)
    Case("op", "unknown_reducer_in_op", "def f(x):\n    y[i] = mean[j](x[i, j])\n    return y\n",
         "mean[j]", "unknown reducer `mean[...]`: the @op reducers are sum, max, e.g."),
    Case("op", "named_reducer_in_expression", "def f(x):\n    return sum[j](x[i, j])\n",
         "sum[j]", "whole right side"),
    Case("op", "named_target_not_a_name",
         "def f(self, x):\n    self.y[i] = x[i]\n", "self.y[i]", "defines a plain name"),
    Case("op", "named_augmented", "def f(y, x):\n    y[i] += x[i]\n", "y[i]", "@cd code"),
    Case("op", "named_slice", "def f(x):\n    y[i] = x[1:3]\n    return y\n", "1:3",
         "slices"),
    Case("op", "named_negative_offset",
         "def f(x):\n    y[i] = x[i - 1]\n    return y\n", "i - 1", "a named index is"),
    Case("op", "named_product_of_indices",
         "def f(x):\n    y[i] = sum[j](x[i * j])\n    return y\n", "i * j", "affine term"),
    Case("op", "max_of_product",
         "def f(a, b):\n    y[i] = max[j](a[i, j] * b[j])\n    return y\n", "a[i, j] *",
         "must be an indexed tensor or a sum"),
    Case("op", "two_ellipses", "def f(x):\n    y[...] = x[..., i, ...]\n    return y\n",
         "x[..., i, ...]", "at most one"),
    Case("op", "unindexed_operand", "def f(x):\n    y[i] = sum[j](x[i, j] * 2.0)\n", "2.0",
         "must be an indexed tensor"),
    # ---- @op: unsupported syntax ------------------------------------------------------
    Case("op", "yield", "def f(x):\n    yield x\n", "yield x", "cannot be a generator"),
    Case("op", "cd_declaration_target", "def f(x):\n    {m}[...] = x\n", "{m}",
         "declares a @cd node"),
    Case("op", "global", "def f(x):\n    global g\n    return x\n", "global g", "global"),
    Case("op", "class_def", "def f(x):\n    class C:\n        pass\n    return x\n",
         "class C", "class definitions"),
    Case("op", "match", "def f(x):\n    match x:\n        case 1:\n            pass\n",
         "match x", "match"),
    Case("op", "try_star", "def f(x):\n    try:\n        pass\n    except* ValueError:\n"
         "        pass\n", "try:", "except*"),
    # ---- @cd ----------------------------------------------------------------------------
    Case("cd", "return_value", "def f(v, a):\n    v[...] = a\n    return v\n", "return v",
         "bare `return`"),
    Case("cd", "del", "def f(v, a):\n    del a\n", "del a", "`del` is not supported in a @cd"),
    Case("cd", "with", "def f(v, a):\n    with a:\n        v[...] = a\n", "with a", "`with`"),
    Case("cd", "try", "def f(v, a):\n    try:\n        v[...] = a\n    except E:\n"
         "        pass\n", "try:", "`try`"),
    Case("cd", "chained_assignment", "def f(a, b, e):\n    a[...] = b[...] = e\n",
         "a[...] =", "chained assignment"),
    Case("cd", "tuple_target_with_tensor", "def f(a, b, x, y):\n    a, b[...] = x, y\n",
         "b[...]", "tuple targets"),
    Case("cd", "attribute_target", "def f(self, e):\n    self.x = e\n", "self.x",
         "assignment targets in @cd"),
    Case("cd", "subscript_of_call", "def f(g, e):\n    g(e)[...] = e\n", "g(e)",
         "subscripted target"),
    Case("cd", "floor_divide_assign", "def f(v, e):\n    v //= e\n", "v //=",
         "no accumulation"),
    Case("cd", "accum_bad_operator", 'def f(v, e):\n    accum(v, "=?", e)\n', '"=?"',
         "not an accumulation operator"),
    Case("cd", "accum_arity", 'def f(v):\n    accum(v, "=:")\n', "accum(", "accum takes"),
    Case("cd", "accum_in_expression", 'def f(v, e):\n    x = accum(v, "=:", e)\n',
         "accum(", "statement of its own"),
    Case("cd", "accum_bad_keyword", 'def f(v, e):\n    accum(v, "=:", e, foo=1)\n', "foo=1",
         "not an accum option"),
    Case("cd", "declaration_with_init", "def f(e):\n    {x := 0.5}[...] = e\n", "x := 0.5",
         "no initial value"),
    Case("cd", "declaration_in_rhs", "def f(v):\n    v[...] = {x}\n", "{x}",
         "only allowed as an assignment target"),
    Case("cd", "duplicate_declaration", "def f(a, b):\n    {d}[...] = a\n    {d}[...] = b\n",
         "{d}", "declared twice", 2),
    Case("cd", "logic_twice", 'def f(v, a, b):\n    v[...] = sum(mul(a, b, logic="@"), '
         'logic="@")\n', 'logic="@"', "given twice"),
    Case("cd", "unknown_named_reducer", "def f(v, a):\n    v[i] = mean[j](a[i, j])\n",
         "mean[j]", "the @cd reducers are sum, prod, max, min, e.g."),
    Case("cd", "unknown_keyword", "def f(v, a, b):\n    v[...] = add(a, b, foo=1)\n",
         "foo=1", "not an assignment option"),
    Case("cd", "nested_logic", 'def f(v, a, b, c):\n    v[...] = add(mul(a, b, logic="@"), c)\n',
         "mul(", "outermost operation"),
    Case("cd", "reducer_disagrees", "def f(v, a):\n    v += max(a)\n", "max(a)",
         "does not agree"),
    Case("cd", "named_missing_reducer", "def f(c, a):\n    c[i] = a[i, j]\n", "a[i, j]",
         "did you mean sum[j](...)?"),
    Case("cd", "named_not_primitive", "def f(c, a):\n    c[i] = a[i] * 2.0\n", "a[i] * 2.0",
         "one primitive over indexed tensors"),
    Case("cd", "named_reducer_mismatch", "def f(c, a):\n    c[i] *= sum[j](a[i, j])\n",
         "sum[j]", "does not agree"),
    Case("cd", "prim_arity", "def f(v, a, b):\n    v[...] = where(a, b)\n", "where(a, b)",
         "takes 3 argument(s)"),
    Case("cd", "nested_whole_reducer", "def f(v, a, b):\n    v[...] = exp(a) + 1.0\n"
         "    v[...] = sum(sum(a))\n", "sum(a))", "cannot be nested"),
    Case("cd", "annotated_tensor_target", "def f(v, a):\n    v[...]: int = a\n", "v[...]",
         "annotated assignment"),
    Case("cd", "async_function", "async def f(v, a):\n    v[...] = a\n", "async def",
         "async"),
    Case("cd", "global", "def f(v):\n    global g\n", "global g", "global"),
]


def _position(text: str, needle: str, occurrence: int) -> tuple[int, int]:
    idx = -1
    for _ in range(occurrence):
        idx = text.index(needle, idx + 1)
    line = text.count("\n", 0, idx) + 1
    return line, idx - (text.rfind("\n", 0, idx) + 1)


def _load(path: Path, text: str) -> types.ModuleType:
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(f"rewrite_corpus_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.op, module.cd = op, cd  # type: ignore[attr-defined]
    spec.loader.exec_module(module)
    return module


def test_corpus_is_large_enough() -> None:
    assert len(CORPUS) >= 30
    assert len({c.name + c.kind for c in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("case", CORPUS, ids=[f"{c.kind}-{c.name}" for c in CORPUS])
def test_malformed_body(case: Case, tmp_path: Path) -> None:
    text = f"# corpus: {case.name}\n\n\n@{case.kind}\n{case.source}"
    path = tmp_path / f"{case.kind}_{case.name}.py"
    with pytest.raises(DslSyntaxError) as info:
        _load(path, text)
    err = info.value
    line, col = _position(text, case.needle, case.occurrence)
    assert err.span is not None
    assert (err.span.file, err.span.line, err.span.col) == (str(path), line, col), str(err)
    assert case.fragment in err.message, err.message
    assert f"{path}:{line}:{col + 1}: " in str(err)
    assert case.needle.strip() in str(err), "the excerpt shows the offending line"


def test_lambda_is_rejected() -> None:
    with pytest.raises(DslSyntaxError, match="lambda"):
        op(lambda x: x)


def test_exec_source_is_rejected() -> None:
    namespace: dict[str, Any] = {}
    exec("def g(x):\n    return {w} @ x\n", namespace)  # noqa: S102 - no source on purpose
    with pytest.raises(DslSyntaxError, match="cannot read the source") as info:
        op(namespace["g"])
    assert info.value.span is not None and info.value.span.line == 1


def test_non_function_is_rejected() -> None:
    with pytest.raises(DslSyntaxError, match="function defined with def"):
        op(staticmethod(len))


def test_wrapped_function_is_rejected() -> None:
    def base(x: Any) -> Any:
        return x

    @functools.wraps(base)
    def wrapper(x: Any) -> Any:
        return base(x)

    with pytest.raises(DslSyntaxError, match="innermost decorator"):
        op(wrapper)


def _boom(*args: Any) -> None:
    raise RuntimeError("internal failure")


def test_internal_errors_become_located(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rewriter_module, "check_syntax", _boom)
    monkeypatch.setenv("OCANNL_AST_REWRITE_CACHE", "off")  # a cached entry skips the rewrite
    monkeypatch.delenv("OCANNL_AST_DEBUG", raising=False)

    def plain(x: Any) -> Any:
        return x

    with pytest.raises(DslSyntaxError, match="internal error.*RuntimeError") as info:
        make_decorator("op", _Anything())(plain)
    assert info.value.span is not None
    assert info.value.span.line == plain.__code__.co_firstlineno
    monkeypatch.setenv("OCANNL_AST_DEBUG", "1")
    with pytest.raises(RuntimeError, match="internal failure"):
        make_decorator("op", _Anything())(plain)


#: Statement snippets combined pairwise: every combination either rewrites or raises
#: DslSyntaxError (never another exception from inside the rewriter).
SNIPPETS = [
    "y[i] = sum[j](x[i, j])", "y[...] = x", "y += x", "y = {w} @ x", "{m}[...] = x",
    "x.grad[i] = x[i]", "accum(y, '=+', x)", "accum(y, '=:', sum(x))", "return",
    "return x", "y[i, j] = x[i]", "z = [1, 2] + x", "y[2*i + 1] = x[i]", "y[a ^ b] = (x[a],)",
    "for k in range(2):\n        y[...] += x", "y[i] = max[j](x[i, j] + x[j])",
    "y[s*i] = x[i]", "y[..., i] = x[..., i, j]", "f = lambda t: {v} * t", "del x",
    "y[i] = x[i, j] * x[j]", "{b, o := [y]}", "y[x[0]] = x", "(y) = x", "y[:] = x",
    "print(sum[j])", "y.value += -x", "y.grad = fma(x, x)", "y[i] = -x[i]",
]


@pytest.mark.parametrize("kind", ["op", "cd"])
def test_no_other_exception_escapes(kind: str) -> None:
    outcomes = {"ok": 0, "error": 0}
    for first, second in itertools.product(SNIPPETS, repeat=2):
        src = "def f(x, y, s):\n" + textwrap.indent(f"{first}\n{second}\n", "    ")
        compile(src, "<combo>", "exec")  # every combination is valid Python
        parsed = parse_function(FunctionSource(src, "<combo>", 1), kind)
        try:
            rewrite_parsed(parsed, kind, "f")
            outcomes["ok"] += 1
        except DslSyntaxError as exc:
            assert exc.span is not None and exc.span.file == "<combo>"
            outcomes["error"] += 1
    assert outcomes["ok"] > 0 and outcomes["error"] > 0
