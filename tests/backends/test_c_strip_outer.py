"""`c_renderer.strip_outer` drops one pair of parentheses exactly when it encloses the whole
text: checked against the definition (a depth scan) on every short text of parentheses and
letters, balanced or not."""

from itertools import product

import pytest

from ocannl_ast.backends.c_renderer import strip_outer


def _by_definition(text: str) -> str:
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        if ch in "()":
            depth += 1 if ch == "(" else -1
            if depth == 0 and k < len(text) - 1:
                return text  # the first parenthesis closes before the end
    return text[1:-1]


def test_every_short_text_agrees_with_the_definition() -> None:
    for n in range(9):
        for chars in product("()a", repeat=n):
            text = "".join(chars)
            assert strip_outer(text) == _by_definition(text), text


@pytest.mark.parametrize(("text", "want"), [
    ("(a + b)", "a + b"),
    ("(a) + (b)", "(a) + (b)"),
    ("((a + b) * c)", "(a + b) * c"),
    ("(a * (b + c))", "a * (b + c)"),
    ("(a + (b)) * (c)", "(a + (b)) * (c)"),
    ("((a) + (b))", "(a) + (b)"),
    ("fmaxf(a, b)", "fmaxf(a, b)"),
    ("()", ""),
])
def test_rendered_shapes(text: str, want: str) -> None:
    assert strip_outer(text) == want
