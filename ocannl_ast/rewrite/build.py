"""CST construction helpers for the code the transformers emit (`__oc__.f(args, k=v)` etc.).

Input: CST expressions taken from the user's body plus Python values (names, strings).
Output: new libcst nodes rendered compactly (no spaces around `=` in keyword arguments).
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ocannl_ast.rewrite.contract import OC

_NO_SPACE = cst.SimpleWhitespace("")
_EQUAL = cst.AssignEqual(whitespace_before=_NO_SPACE, whitespace_after=_NO_SPACE)


def name(value: str) -> cst.Name:
    """A bare identifier."""
    return cst.Name(value)


def string(value: str) -> cst.SimpleString:
    """A double-quoted string literal (values here never contain quotes or backslashes)."""
    return cst.SimpleString(f'"{value}"')


def attr(base: str, field: str) -> cst.Attribute:
    """`base.field`."""
    return cst.Attribute(value=cst.Name(base), attr=cst.Name(field))


def strip_comma(arg: cst.Arg) -> cst.Arg:
    """An argument without its trailing comma (its value and keyword kept)."""
    return arg.with_changes(comma=cst.MaybeSentinel.DEFAULT)


def call(
    func: cst.BaseExpression,
    args: Sequence[cst.BaseExpression | cst.Arg] = (),
    kwargs: Sequence[tuple[str, cst.BaseExpression]] = (),
) -> cst.Call:
    """`func(*args, **kwargs)`; `cst.Arg` items are reused as written (minus their comma)."""
    out = [strip_comma(a) if isinstance(a, cst.Arg) else cst.Arg(value=bare(a)) for a in args]
    out += [cst.Arg(value=bare(v), keyword=cst.Name(k), equal=_EQUAL) for k, v in kwargs]
    return cst.Call(func=func, args=out)


def oc_call(
    builder: str,
    args: Sequence[cst.BaseExpression | cst.Arg] = (),
    kwargs: Sequence[tuple[str, cst.BaseExpression]] = (),
) -> cst.Call:
    """A call of the builder namespace: `__oc__.builder(args, k=v)`."""
    return call(attr(OC, builder), args, kwargs)


def bare(expr: cst.BaseExpression) -> cst.BaseExpression:
    """`expr` ready to be an argument: a bare tuple gets parentheses so it stays one value."""
    if isinstance(expr, cst.Tuple) and not expr.lpar:
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr


def statement(small: cst.BaseSmallStatement) -> cst.SimpleStatementLine:
    """One simple statement on its own line."""
    return cst.SimpleStatementLine(body=[small])


def assign(target: str, value: cst.BaseExpression) -> cst.Assign:
    """`target = value`."""
    return cst.Assign(targets=[cst.AssignTarget(target=cst.Name(target))], value=value)


def spec_string(parts: Sequence[str | tuple[str]]) -> cst.BaseExpression:
    """An einsum spec: plain text parts, and `(name,)` parts spliced in as `{name}` (f-string)."""
    if all(isinstance(p, str) for p in parts):
        return string("".join(p for p in parts if isinstance(p, str)))
    text = "".join(p if isinstance(p, str) else "{" + p[0] + "}" for p in parts)
    expr = cst.parse_expression(f'f"{text}"')
    return expr
