"""Unit tests of the rewriter's pieces: literals, slots, operator vocabulary, source
handling (indented snippets, one-line bodies, line offsets), and layering."""

from __future__ import annotations

import ast
import pathlib

import libcst as cst
import pytest

from ocannl_ast.errors import DslSyntaxError
from ocannl_ast.rewrite import ACCUM_OPS, rewrite_source
from ocannl_ast.rewrite.declarations import slot_of
from ocannl_ast.rewrite.literals import is_numeric_display


def test_docstring_example() -> None:
    out = rewrite_source("@op\ndef f(x):\n    return {w} @ x\n", "op", "f")
    assert out == 'def f(x):\n    w = __oc__.param("w")\n    return w @ x\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[1, 2]", True), ("[(1, -2.5), (3, 4)]", True), ("(1.0,)", True),
        ("batch([[1], [2]])", True), ("[batch([1]), batch([2])]", True), ("[]", False),
        ("[h]", False), ("[1, h]", False), ("[1j]", False), ("[*xs]", False),
        ("batch(xs)", False), ("{1, 2}", False), ("[True]", False),
    ],
)
def test_numeric_display(text: str, expected: bool) -> None:
    assert is_numeric_display(cst.parse_expression(text)) is expected


@pytest.mark.parametrize(
    ("name", "slot"),
    [
        ("x_rhs1", "rhs1"), ("rhs1_x", "rhs1"), ("sum_rhs", "rhs1"), ("rhs_sum", "rhs1"),
        ("lhs_mask", "lhs"), ("mask_lhs", "lhs"), ("a_rhs2", "rhs2"), ("rhs3_b", "rhs3"),
        ("rhs1", None), ("delta", None), ("rhsx", None),
    ],
)
def test_slot_names(name: str, slot: str | None) -> None:
    assert slot_of(name) == slot


def test_accumulation_operators() -> None:
    expected = {"=:", "=+", "=-", "=*", "=/", "=**", "=:+", "=:-", "=:*", "=:/", "=:**",
                "=:@^", "=:@-", "=@^", "=@-", "=||", "=:||", "=&&", "=:&&", "=?/", "=:?/",
                "=?^", "=:?^"}
    assert expected == ACCUM_OPS  # threefry's "=^^^^" waits for its own issue
    assert "=" not in ACCUM_OPS and "=:=" not in ACCUM_OPS


def test_indented_snippet_keeps_absolute_positions() -> None:
    src = "    @op\n    def method(self, x):\n        return {w} @ x + {w}\n"
    with pytest.raises(DslSyntaxError) as info:
        rewrite_source(src, "op", "C.method", filename="m.py", first_line=10)
    span = info.value.span
    assert span is not None and (span.file, span.line, span.col) == ("m.py", 12, 25)
    out = rewrite_source(src.replace(" + {w}", ""), "op", "C.method")
    assert out.startswith("def method(self, x):\n")
    assert 'w = __oc__.param("w")' in out


def test_one_line_body() -> None:
    out = rewrite_source("@cd\ndef f(v, a): v[...] = a\n", "cd", "f")
    tree = ast.parse(out)
    body = tree.body[0].body  # type: ignore[attr-defined]
    assert [type(s).__name__ for s in body] == ["Assign", "Expr", "Return"]


def test_decorators_are_stripped() -> None:
    src = "@functools.cache\n@op\n# comment\ndef f(x):\n    return x\n"
    assert rewrite_source(src, "op", "f") == "def f(x):\n    return x\n"


def test_source_must_hold_one_function() -> None:
    with pytest.raises(DslSyntaxError, match="exactly one function"):
        rewrite_source("x = 1\n", "op", "f")
    with pytest.raises(DslSyntaxError, match="cannot parse"):
        rewrite_source("def f(:\n", "op", "f")


def test_rewrite_never_imports_tensor() -> None:
    root = pathlib.Path(__file__).resolve().parents[2] / "ocannl_ast" / "rewrite"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert "tensor" not in (node.module or ""), path
            elif isinstance(node, ast.Import):
                assert all("tensor" not in a.name for a in node.names), path
