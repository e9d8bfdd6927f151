"""@cd right-hand sides: the outermost operation becomes the assignment's primitive.

Input: an original/updated pair of right-hand-side expressions. Output: the reducer's
accumulation operator (`sum(e)` → "=:+"), the `__oc__.prim("mul", a, b)` call, and the
`logic=`/`projections=` keywords that move onto `__oc__.accum(...)`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import libcst as cst

from ocannl_ast.rewrite import build, literals
from ocannl_ast.rewrite.contract import (
    ACCUM_KWARGS,
    BINARY_PRIMS,
    REDUCER_ACCUM,
    TERNARY_PRIMS,
    UNARY_PRIMS,
)
from ocannl_ast.rewrite.source import Locator
from ocannl_ast.vocabulary import UNSUPPORTED

BINOP_PRIM: dict[type[cst.BaseBinaryOp], str] = {
    cst.Add: "add", cst.Subtract: "sub", cst.Multiply: "mul", cst.Divide: "div",
    cst.Power: "pow", cst.MatrixMultiply: "mul",
}
AUG_ACCUM: dict[type[cst.BaseAugOp], str] = {
    cst.AddAssign: "=+", cst.SubtractAssign: "=-", cst.MultiplyAssign: "=*",
    cst.DivideAssign: "=/", cst.PowerAssign: "=**",
}
#: Which whole-RHS reducer agrees with an augmented accumulation (`v += sum(e)`).
AUG_REDUCER: dict[str, str] = {"=+": "sum", "=-": "sum", "=*": "prod", "=/": "prod"}


@dataclass
class Keywords:
    """`logic=`/`projections=` collected for one accum call, with where each was written."""

    items: list[tuple[str, cst.BaseExpression]] = field(default_factory=list)

    def add(self, key: str, value: cst.BaseExpression, origin: cst.CSTNode, loc: Locator) -> None:
        if any(k == key for k, _ in self.items):
            raise loc.error(origin, f"`{key}=` is given twice for one assignment")
        self.items.append((key, value))

    def has_any(self) -> bool:
        return bool(self.items)


def arity(name: str) -> int | None:
    """How many tensors the named primitive takes (None: not a primitive)."""
    if name in UNARY_PRIMS:
        return 1
    if name in BINARY_PRIMS:
        return 2
    return 3 if name in TERNARY_PRIMS else None


def call_name(node: cst.CSTNode) -> str | None:
    """The name called by `name(...)` (None for other callees and non-calls)."""
    if isinstance(node, cst.Call) and isinstance(node.func, cst.Name):
        return node.func.value
    return None


def _positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None]


def is_reducer(node: cst.CSTNode) -> bool:
    """`sum(e)`, `prod(e)`, `max(e)`, `min(e)` (one positional argument) around a whole RHS."""
    name = call_name(node)
    return name in REDUCER_ACCUM and len(_positional(cst.ensure_type(node, cst.Call))) == 1


def _move_keywords(orig: cst.Call, upd: cst.Call, kw: Keywords, loc: Locator) -> None:
    for a, u in zip(orig.args, upd.args, strict=True):
        if a.star:
            raise loc.error(a, "starred arguments are not supported in assignments")
        if a.keyword is None:
            continue
        if a.keyword.value not in ACCUM_KWARGS:
            raise loc.error(
                a, f"`{a.keyword.value}=` is not an assignment option (logic=, projections=)"
            )
        kw.add(a.keyword.value, u.value, a, loc)


def peel_reducer(
    orig: cst.BaseExpression, upd: cst.BaseExpression, kw: Keywords, loc: Locator
) -> tuple[str | None, cst.BaseExpression, cst.BaseExpression]:
    """Split `sum(e, logic=...)` into ("sum", e, e'), moving its keywords into `kw`."""
    if not is_reducer(orig):
        return None, orig, upd
    o, u = cst.ensure_type(orig, cst.Call), cst.ensure_type(upd, cst.Call)
    _move_keywords(o, u, kw, loc)
    return call_name(o), _positional(o)[0].value, _positional(u)[0].value


def primitive(
    orig: cst.BaseExpression, upd: cst.BaseExpression, kw: Keywords, loc: Locator
) -> cst.Call:
    """`__oc__.prim(name, *args)` for the outermost operation of a right-hand side."""
    if isinstance(orig, cst.BinaryOperation) and type(orig.operator) in BINOP_PRIM:
        u = cst.ensure_type(upd, cst.BinaryOperation)
        if isinstance(orig.operator, cst.MatrixMultiply):
            kw.add("logic", build.string("@"), orig, loc)
        args = [literals.tensor_operand(u.left), literals.tensor_operand(u.right)]
        return build.oc_call("prim", [build.string(BINOP_PRIM[type(orig.operator)]), *args])
    if isinstance(orig, cst.UnaryOperation) and isinstance(orig.operator, cst.Minus):
        operand = literals.tensor_operand(cst.ensure_type(upd, cst.UnaryOperation).expression)
        return build.oc_call("prim", [build.string("neg"), operand])
    name = call_name(orig)
    if name in UNSUPPORTED:
        raise loc.error(orig, f"primitive `{name}` is not supported: {UNSUPPORTED[name]}")
    if name is not None and arity(name) is not None and not is_reducer(orig):
        return _primitive_call(name, cst.ensure_type(orig, cst.Call), upd, kw, loc)
    if name in REDUCER_ACCUM:
        raise loc.error(orig, f"`{name}(...)` reduces a whole right-hand side; it cannot be nested")
    return build.oc_call("prim", [build.string("id"), literals.tensor_operand(upd)])


def _primitive_call(
    name: str, orig: cst.Call, upd: cst.BaseExpression, kw: Keywords, loc: Locator
) -> cst.Call:
    u = cst.ensure_type(upd, cst.Call)
    _move_keywords(orig, u, kw, loc)
    args = [literals.tensor_operand(a.value) for a in _positional(u)]
    if len(args) != arity(name):
        raise loc.error(
            orig, f"primitive `{name}` takes {arity(name)} argument(s), got {len(args)}"
        )
    return build.oc_call("prim", [build.string(name), *args])


def accum_call(
    target: cst.BaseExpression, op: str, prim: cst.Call, kw: Keywords, projections: bool
) -> cst.Call:
    """`__oc__.accum(target, op, prim, logic=..., projections=...)`."""
    items = list(kw.items)
    if projections and not kw.has_any():
        items.append(("projections", build.name("projections")))
    return build.oc_call("accum", [target, build.string(op), prim], items)
