"""Shape tests of CST nodes that the transformers ask (is this `batch([...])`, a named
reducer call, a docstring line, ...), written as plain type tests: `libcst.matchers` would
answer them too, but importing it costs about as much again as libcst itself (thousands of
generated classes), paid by the first rewrite of every cold cache.

Input: a libcst node. Output: whether it has the shape named.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst


def is_number(node: cst.CSTNode) -> bool:
    """An integer or float literal."""
    return isinstance(node, cst.Integer | cst.Float)


def is_signed_number(node: cst.CSTNode) -> bool:
    """A number, or `-`/`+` applied to one."""
    return is_number(node) or (isinstance(node, cst.UnaryOperation)
                               and isinstance(node.operator, cst.Minus | cst.Plus)
                               and is_number(node.expression))


def is_call_of_name(node: cst.CSTNode, name: str) -> bool:
    """`name(arg)`: one positional argument, not starred."""
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Name)
            and node.func.value == name and len(node.args) == 1
            and node.args[0].keyword is None and node.args[0].star == "")


def is_subscript_call(node: cst.CSTNode, names: Sequence[str] | None = None) -> bool:
    """`f[...](...)` with `f` a plain name (one of `names` when given)."""
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Subscript)
            and isinstance(node.func.value, cst.Name)
            and (names is None or node.func.value.value in names))


def is_ellipsis_subscript(node: cst.CSTNode) -> bool:
    """`t[...]`: exactly one index, the ellipsis."""
    return (isinstance(node, cst.Subscript) and len(node.slice) == 1
            and isinstance(node.slice[0].slice, cst.Index)
            and isinstance(node.slice[0].slice.value, cst.Ellipsis))


def is_subscript_target(node: cst.CSTNode) -> bool:
    """An assignment target that is a subscript: `y[i] = ...`."""
    return isinstance(node, cst.AssignTarget) and isinstance(node.target, cst.Subscript)


def is_attribute_of(node: cst.CSTNode, name: str) -> bool:
    """`name.attr`, `name` a plain name."""
    return (isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name)
            and node.value.value == name)


def is_docstring(node: cst.CSTNode) -> bool:
    """A statement line holding only a string literal."""
    return (isinstance(node, cst.SimpleStatementLine) and len(node.body) == 1
            and isinstance(node.body[0], cst.Expr)
            and isinstance(node.body[0].value, cst.SimpleString | cst.ConcatenatedString))


def ends_in_return(node: cst.CSTNode) -> bool:
    """A statement line whose last statement is a `return`."""
    return (isinstance(node, cst.SimpleStatementLine) and bool(node.body)
            and isinstance(node.body[-1], cst.Return))
