"""Numeric displays as tensor literals: `[(1, 2), (3, 4)]` → `__oc__.literal([(1, 2), (3, 4)])`;
block literals (a display with other leaves, e.g. tensors) → `__oc__.block_literal([a, b])`,
which stacks tensor leaves (list = output axis, tuple = input axis, batch = batch axis).

Input: a CST expression in a tensor position (operand of + - * / ** @ or unary -, positional
argument of a tensor function or primitive, @op return value). Output: the same expression,
wrapped when it is a display whose leaves are all numbers; `batch([...])` inside becomes
`__oc__.batch([...])`. Displays anywhere else stay plain Python values (a declaration's init
keeps its display, batch calls converted, so the builder reads values and exact shape).
"""

from __future__ import annotations

import libcst as cst

from ocannl_ast.rewrite import build
from ocannl_ast.rewrite.cst_shapes import is_call_of_name, is_signed_number


def is_batch_call(node: cst.CSTNode) -> bool:
    """`batch(<numeric display>)` — the batch axis of a literal (OCANNL `[| ... |]`)."""
    return is_call_of_name(node, "batch") and is_numeric_display(
        cst.ensure_type(node, cst.Call).args[0].value
    )


def _is_leaf_or_display(node: cst.BaseExpression) -> bool:
    return is_signed_number(node) or is_numeric_display(node)


def is_numeric_display(node: cst.CSTNode) -> bool:
    """A non-empty list/tuple display (or batch call) whose leaves are all numbers."""
    if is_batch_call(node):
        return True
    if not isinstance(node, (cst.List, cst.Tuple)) or not node.elements:
        return False
    return all(
        isinstance(el, cst.Element) and _is_leaf_or_display(el.value) for el in node.elements
    )


class _BatchToBuilder(cst.CSTTransformer):
    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if is_call_of_name(updated_node, "batch"):
            return updated_node.with_changes(func=build.attr("__oc__", "batch"))
        return updated_node


def display(node: cst.BaseExpression) -> cst.BaseExpression:
    """A numeric display as plain nested lists/tuples, its `batch(...)` calls sent to the
    builders (`__oc__.batch(...)`): the form a declaration's `init=` receives."""
    converted = node.visit(_BatchToBuilder())
    assert isinstance(converted, cst.BaseExpression)
    return converted


def is_block_display(node: cst.CSTNode) -> bool:
    """A non-empty list/tuple display (or `batch(...)` of one), no starred elements, at any
    level: its leaves are tensors (or numbers) at run time. Strings are never leaves."""
    if is_call_of_name(node, "batch"):
        return is_block_display(cst.ensure_type(node, cst.Call).args[0].value)
    if not isinstance(node, (cst.List, cst.Tuple)) or not node.elements:
        return False
    return all(isinstance(el, cst.Element) and not isinstance(el.value, _NOT_LEAVES)
               and (not isinstance(el.value, (cst.List, cst.Tuple)) or is_block_display(el.value))
               for el in node.elements)


_NOT_LEAVES = (cst.SimpleString, cst.ConcatenatedString, cst.FormattedString, cst.Dict,
               cst.Set, cst.Lambda)


def literal(node: cst.BaseExpression) -> cst.BaseExpression:
    """`__oc__.literal(<display>)` with inner `batch(...)` calls sent to the builders."""
    return build.oc_call("literal", [display(node)])


def tensor_operand(node: cst.BaseExpression, *, tuples: bool = True) -> cst.BaseExpression:
    """`node` as a tensor: numeric displays become literals, other displays block
    literals (`__oc__.block_literal`), anything else is unchanged. `tuples=False` (an @op
    return value): a top-level tuple of non-numbers stays a tuple (several results), each
    element a tensor operand."""
    if is_numeric_display(node):
        return literal(node)
    if not tuples and isinstance(node, cst.Tuple):
        return node.with_changes(elements=[
            el.with_changes(value=tensor_operand(el.value)) if isinstance(el, cst.Element)
            else el for el in node.elements])
    if is_block_display(node):
        return build.oc_call("block_literal", [display(node)])
    return node
