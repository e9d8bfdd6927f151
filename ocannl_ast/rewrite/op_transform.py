"""@op transformer: tensor-expression bodies → calls of the builder namespace.

Input: the original CST of an @op `def`. Output: the same def with inline declarations
hoisted as `w = __oc__.param(...)`, numeric displays in tensor positions wrapped as
`__oc__.literal(...)`, and named-index definitions `y[i] = sum[j](x[i, j])` turned into
`y = __oc__.einsum("i,j=>i", x)` (`max[...]` → einsum_max, a tuple of operands → concat).
"""

from __future__ import annotations

import libcst as cst

from ocannl_ast.rewrite import build, literals, named_index
from ocannl_ast.rewrite.contract import OP_REDUCER_BUILDER, TENSOR_FUNCTIONS
from ocannl_ast.rewrite.cst_shapes import is_subscript_target
from ocannl_ast.rewrite.named_index import Reduction
from ocannl_ast.rewrite.source import Locator, ParsedFunction
from ocannl_ast.rewrite.transform_base import DialectTransformer


def _flatten(node: cst.BaseExpression, op: type[cst.BaseBinaryOp]) -> list[cst.BaseExpression]:
    if isinstance(node, cst.BinaryOperation) and isinstance(node.operator, op):
        return [*_flatten(node.left, op), *_flatten(node.right, op)]
    return [node]


def _func_name(func: cst.BaseExpression) -> str | None:
    if isinstance(func, cst.Name):
        return func.value
    if isinstance(func, cst.Attribute):
        return func.attr.value
    return None


class OpTransformer(DialectTransformer):
    """Rewrites one @op function (see the module docstring)."""

    kind = "op"

    def __init__(self, parsed: ParsedFunction, loc: Locator, qualname: str) -> None:
        super().__init__(parsed, loc, qualname)
        self.set_depth = 0
        self.display_depth = 0
        self.inits: set[int] = set()

    # -- declarations and literals -----------------------------------------------------
    def visit_Set(self, node: cst.Set) -> None:
        self.set_depth += 1
        head = node.elements[0].value if node.elements else None
        if isinstance(head, cst.NamedExpr):
            self.inits.add(id(head.value))  # the declaration reads a batch(...) init itself

    def leave_Set(self, original_node: cst.Set, updated_node: cst.Set) -> cst.BaseExpression:
        self.set_depth -= 1
        if self.set_depth:
            raise self.loc.error(
                original_node, "a declaration cannot appear inside another declaration's fields"
            )
        return self.declare(original_node, updated_node)

    def visit_List(self, node: cst.List) -> None:
        self.display_depth += 1

    def leave_List(self, original_node: cst.List, updated_node: cst.List) -> cst.List:
        self.display_depth -= 1
        return updated_node

    def visit_Tuple(self, node: cst.Tuple) -> None:
        self.display_depth += 1

    def leave_Tuple(self, original_node: cst.Tuple, updated_node: cst.Tuple) -> cst.Tuple:
        self.display_depth -= 1
        return updated_node

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.BaseExpression:
        self.check_named_reducer(original_node)
        top_level = not self.display_depth and id(original_node) not in self.inits
        if literals.is_batch_call(updated_node) and top_level:
            return literals.literal(updated_node)
        if _func_name(updated_node.func) not in TENSOR_FUNCTIONS:
            return updated_node
        args = [
            a.with_changes(value=literals.tensor_operand(a.value))
            if a.keyword is None and not a.star
            else a
            for a in updated_node.args
        ]
        return updated_node.with_changes(args=args)

    def leave_Return(self, original_node: cst.Return, updated_node: cst.Return) -> cst.Return:
        if self.at_top and updated_node.value is not None:
            value = literals.tensor_operand(updated_node.value, tuples=False)
            return updated_node.with_changes(value=value)
        return updated_node

    # -- named-index definitions -------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        if any(is_subscript_target(t) for t in node.targets):
            self.named_rhs.add(id(node.value))

    def leave_Assign(self, original_node: cst.Assign, updated_node: cst.Assign) -> cst.Assign:
        if not any(is_subscript_target(t) for t in original_node.targets):
            return updated_node
        return self.named_definition(original_node, updated_node)

    def leave_AugAssign(
        self, original_node: cst.AugAssign, updated_node: cst.AugAssign
    ) -> cst.AugAssign:
        if isinstance(original_node.target, cst.Subscript):
            raise self.loc.error(
                original_node.target,
                "in @op a subscripted target defines a tensor with `=`; accumulating into "
                "a tensor is @cd code",
            )
        return updated_node

    def leave_AnnAssign(
        self, original_node: cst.AnnAssign, updated_node: cst.AnnAssign
    ) -> cst.AnnAssign:
        if isinstance(original_node.target, cst.Subscript):
            raise self.loc.error(
                original_node.target, "a named-index definition takes no annotation"
            )
        return updated_node

    def named_definition(self, original: cst.Assign, updated: cst.Assign) -> cst.Assign:
        """`y[i] = sum[j](x[i, j])` → `y = __oc__.einsum("i,j=>i", x)`."""
        if len(original.targets) != 1:
            raise self.loc.error(original, "a named-index definition has exactly one target")
        target = original.targets[0].target
        if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Set):
            raise self.loc.error(
                target, "`{x}[...] = e` declares a @cd node; in @op write {x} in an expression"
            )
        if not isinstance(target, cst.Subscript) or not isinstance(target.value, cst.Name):
            raise self.loc.error(
                target, "a named-index definition defines a plain name: y[i] = ..."
            )
        values = self.values()
        lhs = named_index.parse_row(target, values, self.loc)
        red = named_index.split_reduction(original.value, updated.value, self.loc, "@op",
                                          tuple(OP_REDUCER_BUILDER))
        builder, subs, exprs = self._operands(red)
        rows = [named_index.parse_row(s, values, self.loc) for s in subs]
        named_index.check_consumed(lhs, rows, red, self.loc)
        value = build.oc_call(builder, [named_index.spec(rows, lhs), *exprs])
        return updated.with_changes(
            targets=[cst.AssignTarget(target=cst.Name(target.value.value))], value=value
        )

    def _operands(
        self, red: Reduction
    ) -> tuple[str, list[cst.Subscript], list[cst.BaseExpression]]:
        if red.reducer is not None and red.reducer not in OP_REDUCER_BUILDER:
            raise self.loc.error(
                red.node,
                f"@op has no `{red.reducer}` reduction (only sum[...] and max[...]); "
                f"use @cd: y[...] = {red.reducer}(...)",
            )
        builder = OP_REDUCER_BUILDER.get(red.reducer or "sum", "einsum")
        pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]]
        if isinstance(red.body, cst.Tuple) and isinstance(red.updated, cst.Tuple):
            if red.reducer is not None:
                raise self.loc.error(red.body, "a concatenation takes no reducer")
            builder = "concat"
            pairs = [
                (a.value, b.value)
                for a, b in zip(red.body.elements, red.updated.elements, strict=True)
            ]
        else:
            op: type[cst.BaseBinaryOp] = cst.Add if builder == "einsum_max" else cst.Multiply
            pairs = list(zip(_flatten(red.body, op), _flatten(red.updated, op), strict=True))
            if builder == "einsum_max" and len(pairs) > 2:
                raise self.loc.error(red.body, "max[...] takes one operand or a sum of two")
        for orig, _ in pairs:
            if not isinstance(orig, cst.Subscript):
                raise self.loc.error(orig, self._operand_hint(builder))
        subs = [cst.ensure_type(o, cst.Subscript) for o, _ in pairs]
        exprs = [cst.ensure_type(u, cst.Subscript).value for _, u in pairs]
        return builder, subs, exprs

    @staticmethod
    def _operand_hint(builder: str) -> str:
        shape = {
            "einsum": "an indexed tensor x[i, j] or a product a[i, k] * b[k, j]",
            "einsum_max": "an indexed tensor or a sum a[i, j] + b[j] (tropical)",
            "concat": "a tuple of indexed tensors (x[a], y[b])",
        }[builder]
        return f"the right side of this named-index definition must be {shape}"
