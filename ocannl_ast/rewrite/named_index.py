"""Named-index forms (seed 003): `c[i, j] = sum[k](a[i, k] * b[k, j])` → spec "i,k;k,j=>i,j".

Input: original CST subscripts, the reducer call around a right-hand side, and the names
bound in the enclosing function (Python values, spliced into the spec with an f-string).
Output: `Row`s, the reducer, consumed-index checks, and the spec string expression.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import libcst as cst

from ocannl_ast.rewrite import build
from ocannl_ast.rewrite.cst_shapes import is_ellipsis_subscript, is_subscript_call
from ocannl_ast.rewrite.source import Locator

Part = str | tuple[str]  #: spec text, or `(name,)`: a Python value spliced in at run time
REDUCERS = ("sum", "prod", "max", "min")


@dataclass(frozen=True, slots=True)
class Row:
    """The axes of one indexed tensor, as spec text."""

    parts: tuple[Part, ...]  #: e.g. ("i", ",", "k") or ("...|...->...", ",", "i")
    labels: frozenset[str]  #: index variables it mentions
    sliced: frozenset[str]  #: labels that occur only as `^` components (slices, not reductions)
    node: cst.Subscript  #: the original subscript


@dataclass(frozen=True, slots=True)
class Reduction:
    """`sum[j, k](body)`: the reducer, its listed indices, and the body (original/updated)."""

    reducer: str | None  #: None when the right side has no reducer
    indices: tuple[cst.Name, ...]  #: listed indices, original nodes
    body: cst.BaseExpression  #: original body
    updated: cst.BaseExpression  #: transformed body
    node: cst.BaseExpression  #: the whole original right side


class _Axis:
    """Converts one subscript element into spec parts, collecting index variables."""

    def __init__(self, values: set[str], loc: Locator) -> None:
        self.values = values
        self.loc = loc
        self.labels: set[str] = set()
        self.outside: set[str] = set()  # labels used outside `^` concatenations
        self.in_concat = False

    def name(self, node: cst.Name, allow_value: bool = True) -> Part:
        if node.value == "_":
            return "_"
        if node.value in self.values:
            if not allow_value:
                raise self.loc.error(node, f"`{node.value}` is a Python value here, not an index")
            return (node.value,)
        self.labels.add(node.value)
        if not self.in_concat:
            self.outside.add(node.value)
        return node.value

    def convert(self, node: cst.BaseExpression) -> list[Part]:
        if isinstance(node, cst.Name):
            return [self.name(node)]
        if isinstance(node, cst.Integer):
            return [str(int(node.value, 0))]
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitXor):
            self.in_concat = True
            try:
                return self.concat(node)
            finally:
                self.in_concat = False
        if isinstance(node, cst.BinaryOperation) and isinstance(
            node.operator, (cst.Add, cst.Multiply)
        ):
            return self.affine(node)
        raise self.loc.error(
            node,
            "a named index is a name, an integer, `...`, an affine form like `2*o + k`, "
            "or a concatenation like `a ^ b`",
        )

    def concat(self, node: cst.BaseExpression) -> list[Part]:
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.BitXor):
            return [*self.concat(node.left), "^", *self.concat(node.right)]
        if isinstance(node, cst.Name):
            return [self.name(node)]
        if isinstance(node, cst.Integer):
            return [str(int(node.value, 0))]
        raise self.loc.error(node, "a concatenation component is an index name or an integer")

    def affine(self, node: cst.BaseExpression) -> list[Part]:
        terms = _flatten_add(node)
        scaled: list[list[Part]] = []
        consts: list[list[Part]] = []
        for term in terms:
            parts, is_const = self.term(term)
            (consts if is_const else scaled).append(parts)
        if not scaled or len(scaled) > 2 or len(consts) > 1:
            raise self.loc.error(
                node, "an affine index is `stride*o + k`, `stride*o + dilation*k` or `s*o + c`"
            )
        out: list[Part] = []
        for parts in [*scaled, *consts]:
            out += (["+"] if out else []) + parts
        return out

    def term(self, node: cst.BaseExpression) -> tuple[list[Part], bool]:
        if isinstance(node, cst.Integer):
            return [str(int(node.value, 0))], True
        if isinstance(node, cst.Name):
            part = self.name(node)
            return [part], isinstance(part, tuple)
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Multiply):
            coef, var = node.left, node.right
            if isinstance(coef, cst.Name) and coef.value not in self.values:
                coef, var = var, coef  # `o*2` is `2*o`
            if isinstance(var, cst.Name) and isinstance(coef, (cst.Integer, cst.Name)):
                c = str(int(coef.value, 0)) if isinstance(coef, cst.Integer) else (coef.value,)
                if isinstance(c, str) or coef.value in self.values:
                    return [c, "*", self.name(var, allow_value=False)], False
        if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Subtract):
            raise self.loc.error(node, "negative offsets are not expressible in a named index")
        raise self.loc.error(
            node, "an affine term is `k`, `c*k` (c an integer or a Python value) or a constant"
        )


def _flatten_add(node: cst.BaseExpression) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, cst.Add) and not (
        node.lpar
    ):
        return [*_flatten_add(node.left), *_flatten_add(node.right)]
    return [node]


def parse_row(sub: cst.Subscript, values: set[str], loc: Locator) -> Row:
    """The spec row of `t[i, 2*o + k, ...]`; `x[..., i]` reads `...|...->...,i`."""
    axis = _Axis(values, loc)
    items: list[list[Part]] = []
    ellipses = 0
    for el in sub.slice:
        if not isinstance(el.slice, cst.Index) or getattr(el.slice, "star", None) is not None:
            raise loc.error(el, "slices and starred indices are not named indices")
        if isinstance(el.slice.value, cst.Ellipsis):
            ellipses += 1
            items.append(["..."])
            continue
        items.append(axis.convert(el.slice.value))
    if ellipses > 1:
        raise loc.error(sub, "at most one `...` per subscript")
    parts: list[Part] = ["...|...->"] if ellipses else []
    for k, item in enumerate(items):
        parts += ([","] if k else []) + item
    if len(items) == 1 and not ellipses:
        parts.append(",")  # multi-char mode needs a comma in every spec
    sliced = frozenset(axis.labels - axis.outside)
    return Row(tuple(parts), frozenset(axis.labels), sliced, sub)


def is_whole(sub: cst.Subscript) -> bool:
    """`t[...]`: the whole tensor, no named indices."""
    return is_ellipsis_subscript(sub)


def split_reduction(
    original: cst.BaseExpression, updated: cst.BaseExpression, loc: Locator,
    dialect: str = "@cd", accepted: Sequence[str] = REDUCERS,
) -> Reduction:
    """Peel `reducer[indices](body)` off a right-hand side (reducer None when absent).
    An unknown reducer's message lists those the `dialect` (@op or @cd) `accepted`."""
    if is_subscript_call(original) and not is_subscript_call(original, REDUCERS):
        head = cst.ensure_type(cst.ensure_type(original, cst.Call).func, cst.Subscript)
        raise loc.error(
            head.value,
            f"unknown reducer `{cst.ensure_type(head.value, cst.Name).value}[...]`: the "
            f"{dialect} reducers are {', '.join(accepted)}, e.g. y[i] = sum[j](x[i, j])",
        )
    if not is_subscript_call(original, REDUCERS):
        return Reduction(None, (), original, updated, original)
    call = cst.ensure_type(original, cst.Call)
    head = cst.ensure_type(call.func, cst.Subscript)
    if len(call.args) != 1 or call.args[0].keyword is not None or call.args[0].star:
        raise loc.error(call, "a named reducer takes one expression: sum[j](x[i, j])")
    indices: list[cst.Name] = []
    for el in head.slice:
        value = el.slice.value if isinstance(el.slice, cst.Index) else None
        if not isinstance(value, cst.Name):
            raise loc.error(el, "reducer indices are plain names: sum[j, k](...)")
        indices.append(value)
    body = cst.ensure_type(updated, cst.Call).args[0].value
    name = cst.ensure_type(head.value, cst.Name).value
    return Reduction(name, tuple(indices), call.args[0].value, body, original)


def check_consumed(lhs: Row, rhs: Sequence[Row], red: Reduction, loc: Locator) -> None:
    """The reducer lists exactly the indices that appear on the right but not on the left."""
    right = frozenset().union(*(r.labels for r in rhs))
    # A label that only ever names a `^` component selects part of an axis: not a reduction.
    reducible = frozenset().union(*(r.labels - r.sliced for r in rhs))
    consumed = reducible - lhs.labels
    listed: set[str] = set()
    for idx in red.indices:
        where = f"{red.reducer}[...]"
        if idx.value in listed:
            raise loc.error(idx, f"index `{idx.value}` is listed twice in {where}")
        if idx.value in lhs.labels:
            raise loc.error(idx, f"index `{idx.value}` in {where} is kept on the left side")
        if idx.value not in right:
            raise loc.error(idx, f"index `{idx.value}` in {where} does not appear on the right")
        listed.add(idx.value)
    missing = sorted(consumed - listed)
    if missing and red.reducer is None:
        names = ", ".join(missing)
        raise loc.error(
            red.node,
            f"index {names} appears on the right but not on the left, and nothing reduces "
            f"it: did you mean sum[{names}](...)? (A name in brackets is an index label, "
            "never a Python value: a fixed position is an integer literal, x[i, 2].)",
        )
    if missing:
        raise loc.error(
            red.node,
            f"index {', '.join(missing)} is reduced (it is not on the left) but not listed "
            f"in {red.reducer}[{', '.join(i.value for i in red.indices)}]",
        )


def spec(rhs: Sequence[Row], lhs: Row) -> cst.BaseExpression:
    """The spec `rhs1;rhs2=>lhs` as a string, or an f-string when values are spliced in."""
    parts: list[Part] = []
    for k, row in enumerate(rhs):
        parts += ([";"] if k else []) + list(row.parts)
    parts += ["=>", *lhs.parts]
    return build.spec_string(parts)
