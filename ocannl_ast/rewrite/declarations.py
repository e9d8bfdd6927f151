"""Inline declarations: `{w}`, `{w := 0.5}`, `{b, o := [h]}` (@op) and `{x}[...]` (@cd).

Input: an original/updated pair of set displays. Output: a `Declaration`, the statement that
creates it (`w = __oc__.param("w", output_dims=[h])`, hoisted to the top of the
decorated function) and the checks that make hoisting safe (no name bound in the body).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import libcst as cst

from ocannl_ast.rewrite import build, literals
from ocannl_ast.rewrite.contract import FIELD_ALIASES
from ocannl_ast.rewrite.source import Locator

_SLOT_AFFIXES: tuple[tuple[str, str], ...] = (
    ("lhs", "lhs"), ("rhs", "rhs1"), ("rhs1", "rhs1"), ("rhs2", "rhs2"), ("rhs3", "rhs3"),
)


@dataclass(frozen=True, slots=True)
class Field:
    """One `key := value` of a declaration (the init of `{w := 0.5}` has key "init")."""

    key: str  #: builder keyword (shorthands o/i/b already expanded)
    value: cst.BaseExpression  #: the transformed value, emitted into the hoisted call
    original: cst.BaseExpression | None  #: the value as written (None when synthesized)


@dataclass(frozen=True, slots=True)
class Declaration:
    """An inline declaration found in a decorated body."""

    name: str  #: the bound name and the tensor's label
    builder: str  #: "param" (@op) or "node" (@cd)
    fields: tuple[Field, ...]  #: keyword arguments, in source order
    origin: cst.Set  #: the original display, for locating errors and line numbers


def slot_of(name: str) -> str | None:
    """The projection slot a @cd declaration name selects (`x_rhs1`, `lhs_x`, ...), if any."""
    for affix, slot in _SLOT_AFFIXES:
        if name.startswith(affix + "_") or name.endswith("_" + affix):
            return slot
    return None


def _field(el: cst.BaseElement, upd: cst.BaseElement, loc: Locator) -> Field:
    value = el.value
    if not isinstance(el, cst.Element) or not isinstance(value, cst.NamedExpr):
        raise loc.error(el.value, "declaration fields are written `name := value`")
    if not isinstance(value.target, cst.Name):
        raise loc.error(value.target, "a declaration field name must be an identifier")
    key = FIELD_ALIASES.get(value.target.value, value.target.value)
    return Field(key, cst.ensure_type(upd.value, cst.NamedExpr).value, value.value)


def _head(el: cst.BaseElement, upd: cst.BaseElement, kind: str, loc: Locator) -> tuple[
    str, list[Field]
]:
    value = el.value
    if isinstance(el, cst.Element) and isinstance(value, cst.Name):
        return value.value, []
    if (
        isinstance(el, cst.Element)
        and isinstance(value, cst.NamedExpr)
        and isinstance(value.target, cst.Name)
    ):
        if kind == "cd":
            raise loc.error(
                value, "a @cd declaration takes no initial value; assign it: {x}[...] = e"
            )
        init = cst.ensure_type(upd.value, cst.NamedExpr).value
        if literals.is_numeric_display(init):
            init = literals.display(init)  # values and exact shape, read by the builder
        return value.target.value, [Field("init", init, value.value)]
    raise loc.error(
        el.value, "a declaration starts with a name or `name := init`, e.g. {w} or {w := 0.5}"
    )


def parse_declaration(
    original: cst.Set, updated: cst.Set, kind: str, loc: Locator
) -> Declaration:
    """Read a set display as a declaration; raise DslSyntaxError when it is malformed."""
    pairs = list(zip(original.elements, updated.elements, strict=True))
    name, fields = _head(*pairs[0], kind, loc)
    for el, upd in pairs[1:]:
        field = _field(el, upd, loc)
        if any(f.key == field.key for f in fields):
            raise loc.error(el.value, f"field `{field.key}` is given twice in the declaration")
        fields.append(field)
    slot = slot_of(name) if kind == "cd" else None
    if slot is not None and all(f.key != "slot" for f in fields):
        fields.append(Field("slot", build.string(slot), None))
    return Declaration(name, "param" if kind == "op" else "node", tuple(fields), original)


def hoisted_statement(decl: Declaration) -> cst.SimpleStatementLine:
    """`name = __oc__.param("name", k=v, ...)` (or `__oc__.node`)."""
    kwargs = [(f.key, f.value) for f in decl.fields]
    value = build.oc_call(decl.builder, [build.string(decl.name)], kwargs)
    return build.statement(build.assign(decl.name, value))


class _Names(cst.CSTVisitor):
    """Names read by an expression (attribute fields and keyword names excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[cst.Name] = []

    def visit_Name(self, node: cst.Name) -> None:
        self.found.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False


def check_hoistable(
    decls: list[Declaration],
    params: set[str],
    bound: Mapping[str, cst.CSTNode],
    qualname: str,
    loc: Locator,
) -> None:
    """Every name a declaration's fields read must exist when the function starts."""
    names = {d.name for d in decls}
    earlier: set[str] = set()
    for decl in decls:
        if decl.name in bound or decl.name in params:
            where = "a parameter" if decl.name in params else (
                f"bound in the body (line {loc.lines(bound[decl.name])[0]})"
            )
            raise loc.error(
                decl.origin, f"`{decl.name}` is declared inline but is also {where}; rename one"
            )
        for f in decl.fields:
            if f.original is None:
                continue
            reader = _Names()
            f.original.visit(reader)
            for ref in reader.found:
                _check_ref(ref, decl, params, bound, names, earlier, qualname, loc)
        earlier.add(decl.name)


def _check_ref(
    ref: cst.Name,
    decl: Declaration,
    params: set[str],
    bound: Mapping[str, cst.CSTNode],
    names: set[str],
    earlier: set[str],
    qualname: str,
    loc: Locator,
) -> None:
    what = f"the declaration of `{decl.name}` is created at the start of {qualname}"
    if ref.value in names and ref.value not in earlier:
        raise loc.error(ref, f"{what}, before `{ref.value}` is declared")
    if ref.value in bound:
        line = loc.lines(bound[ref.value])[0]
        role = "reassigned" if ref.value in params else "bound"
        raise loc.error(
            ref,
            f"{what}, but `{ref.value}` is {role} in the body (line {line}): a declaration "
            "can only use parameters, globals and earlier declarations",
        )
