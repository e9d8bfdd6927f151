"""Shared machinery of the @op and @cd transformers: scopes, declarations, hoisting, lines.

Input: the original CST of the decorated `def` (visited as part of its module). Output: the
transformed `def` (decorators stripped, declarations hoisted after the docstring) and, for
every emitted statement, the user's line range it stands for (used by `codegen`).
"""

from __future__ import annotations

import libcst as cst
from libcst._types import CSTNodeT

from ocannl_ast.errors import Span
from ocannl_ast.rewrite import affine_scope, build, literals
from ocannl_ast.rewrite.bindings import body_bindings, param_names, scope_bindings
from ocannl_ast.rewrite.contract import OC, SPANS
from ocannl_ast.rewrite.cst_shapes import (
    ends_in_return as _ends_in_return,
)
from ocannl_ast.rewrite.cst_shapes import (
    is_attribute_of,
    is_docstring,
    is_subscript_call,
)
from ocannl_ast.rewrite.declarations import (
    Declaration,
    check_hoistable,
    hoisted_statement,
    parse_declaration,
)
from ocannl_ast.rewrite.named_index import REDUCERS
from ocannl_ast.rewrite.source import Locator, ParsedFunction

_ARITHMETIC = (cst.Add, cst.Subtract, cst.Multiply, cst.Divide, cst.Power, cst.MatrixMultiply)

#: Line records: id(emitted statement) -> (statement, first user line, last user line).
LineTable = dict[int, tuple[cst.CSTNode, int, int]]
#: Expression origins: id(emitted expression) -> (expression, user (line, col, end_line,
#: end_col), columns in characters) of the original expression it replaces.
OriginTable = dict[int, tuple[cst.CSTNode, tuple[int, int, int, int]]]


#: Builders whose errors point at the statement that called them: each call gets the
#: user's span explicitly, `span=__oc_spans__[k]` (a per-function table bound at decoration).
#: (Declarations `{w, o := [h]}` keep the frame position, which points at the bad field.)
SPANNED_BUILDERS = frozenset({"accum", "einsum", "einsum_max", "concat", "rebound"})


class _AddSpan(cst.CSTTransformer):
    """Appends `span=__oc_spans__[k]` to the spanned builder calls that have none yet."""

    def __init__(self, ref: cst.BaseExpression) -> None:
        super().__init__()
        self.ref = ref
        self.moved: dict[int, cst.CSTNode] = {}  #: id(node visited) -> the node replacing it

    def on_leave(
        self, original_node: CSTNodeT, updated_node: CSTNodeT
    ) -> CSTNodeT | cst.RemovalSentinel | cst.FlattenSentinel[CSTNodeT]:
        result = super().on_leave(original_node, updated_node)
        if isinstance(result, cst.CSTNode):
            self.moved[id(original_node)] = result
        return result

    def leave_Call(self, original_node: cst.Call, updated_node: cst.Call) -> cst.Call:
        if not is_attribute_of(updated_node.func, OC):
            return updated_node
        func = cst.ensure_type(updated_node.func, cst.Attribute)
        if func.attr.value not in SPANNED_BUILDERS or any(
            a.keyword is not None and a.keyword.value == "span" for a in updated_node.args
        ):
            return updated_node
        return build.call(func, list(updated_node.args), [("span", self.ref)])


class DialectTransformer(cst.CSTTransformer):
    """Base of OpTransformer and CdTransformer; subclasses set `kind` and the hooks."""

    kind = ""

    def __init__(self, parsed: ParsedFunction, loc: Locator, qualname: str) -> None:
        super().__init__()
        self.loc = loc
        self.qualname = qualname
        self.root = parsed.funcdef
        self.params = set(param_names(self.root.params))
        self.bound = body_bindings(self.root, self.kind)
        self.decls: list[Declaration] = []
        self.scopes: list[set[str]] = []
        self.lines: LineTable = {}
        self.origins: OriginTable = {}
        self.named_rhs: set[int] = set()  # ids of original RHS nodes of named-index statements
        self.spans: list[Span] = []  # the user spans `__oc_spans__[k]` refers to
        self.spec_args: set[int] = set()  # ids of original spec-literal arguments

    def spanned(self, node: CSTNodeT, origin: cst.CSTNode) -> CSTNodeT:
        """`node` with its spanned builder calls given the span of the original `origin`."""
        ref = cst.Subscript(build.name(SPANS), [cst.SubscriptElement(
            cst.Index(cst.Integer(str(len(self.spans)))))])
        adder = _AddSpan(ref)
        out = cst.ensure_type(node.visit(adder), type(node))
        if out.deep_equals(node):
            return node
        self.spans.append(self.loc.span(origin))
        for old, new in adder.moved.items():  # the visit rebuilt the nodes: keep their origins
            if old in self.origins:
                self.origins[id(new)] = (new, self.origins.pop(old)[1])
        return out

    # -- bookkeeping -------------------------------------------------------------------
    def record(self, node: cst.CSTNode, first: int, last: int) -> None:
        """Remember which user lines an emitted statement stands for."""
        self.lines[id(node)] = (node, first, last)

    def on_leave(
        self, original_node: CSTNodeT, updated_node: CSTNodeT
    ) -> CSTNodeT | cst.RemovalSentinel | cst.FlattenSentinel[CSTNodeT]:
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, cst.BaseSmallStatement) and isinstance(result, cst.CSTNode):
            result = self.spanned(result, original_node)
        stmt = (cst.SimpleStatementLine, cst.BaseCompoundStatement)
        if (
            isinstance(original_node, stmt)
            and isinstance(result, cst.CSTNode)
            and original_node in self.loc.positions
        ):
            self.record(result, *self.loc.lines(original_node))
        if isinstance(original_node, cst.BaseExpression) and isinstance(result, cst.CSTNode):
            self.origins[id(result)] = (result, self.loc.range(original_node))
        return result

    @property
    def at_top(self) -> bool:
        """True inside the decorated function itself (not in a nested def)."""
        return len(self.scopes) == 1

    def values(self) -> set[str]:
        """Names bound by the enclosing functions: Python values in named-index subscripts."""
        return set().union(*self.scopes)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.scopes.append(scope_bindings(node, self.kind))
        return True

    def visit_Decorator(self, node: cst.Decorator) -> bool:
        return len(self.scopes) > 1  # the decorated def's own decorators are stripped

    def visit_Parameters(self, node: cst.Parameters) -> bool:
        return node is not self.root.params  # defaults are evaluated once, as written

    # -- spec literals with affine values from scope (`affine_scope`) ------------------
    def visit_Call(self, node: cst.Call) -> bool:
        self.spec_args.update(id(a) for a in affine_scope.spec_literal_args(node))
        return True

    def leave_Arg(self, original_node: cst.Arg, updated_node: cst.Arg) -> cst.Arg:
        if id(original_node) not in self.spec_args:
            return updated_node
        literal = cst.ensure_type(original_node.value, cst.SimpleString)
        wrapped = affine_scope.wrap(literal)
        if wrapped is None:
            return updated_node
        self.origins[id(wrapped)] = (wrapped, self.loc.range(literal))
        return updated_node.with_changes(value=wrapped)

    # -- declarations ------------------------------------------------------------------
    def declare(self, original: cst.Set, updated: cst.Set) -> cst.BaseExpression:
        """Register an inline declaration; the display becomes its name."""
        decl = parse_declaration(original, updated, self.kind, self.loc)
        for prior in self.decls:
            if prior.name == decl.name:
                line = self.loc.lines(prior.origin)[0]
                raise self.loc.error(
                    original, f"`{decl.name}` is declared twice (first declaration: line {line})"
                )
        self.decls.append(decl)
        return cst.Name(decl.name, lpar=updated.lpar, rpar=updated.rpar)

    # -- tensor positions --------------------------------------------------------------
    def leave_BinaryOperation(
        self, original_node: cst.BinaryOperation, updated_node: cst.BinaryOperation
    ) -> cst.BaseExpression:
        if not isinstance(updated_node.operator, _ARITHMETIC):
            return updated_node
        return updated_node.with_changes(
            left=literals.tensor_operand(updated_node.left),
            right=literals.tensor_operand(updated_node.right),
        )

    def leave_UnaryOperation(
        self, original_node: cst.UnaryOperation, updated_node: cst.UnaryOperation
    ) -> cst.BaseExpression:
        if not isinstance(updated_node.operator, (cst.Minus, cst.Plus)):
            return updated_node
        return updated_node.with_changes(
            expression=literals.tensor_operand(updated_node.expression)
        )

    def check_named_reducer(self, original: cst.Call) -> None:
        """`sum[j](...)` only as the whole right side of a named-index assignment."""
        if is_subscript_call(original, REDUCERS) and id(original) not in self.named_rhs:
            raise self.loc.error(
                original,
                "a named reduction like sum[j](...) must be the whole right side of a "
                "named-index assignment: y[i] = sum[j](x[i, j])",
            )

    # -- the decorated function --------------------------------------------------------
    def leave_FunctionDef(
        self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
    ) -> cst.FunctionDef:
        self.scopes.pop()
        if self.scopes:
            return updated_node
        check_hoistable(self.decls, self.params, self.bound, self.qualname, self.loc)
        first, last = self.loc.lines(original_node)
        body = self._body_statements(updated_node.body, first)
        head = body[:1] if body and is_docstring(body[0]) else []
        hoisted: list[cst.BaseStatement] = []
        for decl in self.decls:
            stmt = self.spanned(hoisted_statement(decl), decl.origin)
            self.record(stmt, *self.loc.lines(decl.origin))
            hoisted.append(stmt)
        middle = self.prologue(first) + body[len(head) :]
        ends_in_return = bool(body) and _ends_in_return(body[-1])
        tail = [] if ends_in_return else self.epilogue(last)
        new_body = [*head, *hoisted, *middle, *tail]
        block = updated_node.body
        indent = block.indent if isinstance(block, cst.IndentedBlock) else None
        return updated_node.with_changes(
            body=cst.IndentedBlock(body=new_body, indent=indent),
            decorators=(),
            leading_lines=(),
            lines_after_decorators=(),
        )

    def _body_statements(self, suite: cst.BaseSuite, line: int) -> list[cst.BaseStatement]:
        if isinstance(suite, cst.IndentedBlock):
            return list(suite.body)
        small = cst.ensure_type(suite, cst.SimpleStatementSuite)
        stmt = cst.SimpleStatementLine(body=small.body)
        self.record(stmt, line, line)
        return [stmt]

    def prologue(self, line: int) -> list[cst.BaseStatement]:
        """Statements placed after the hoisted declarations (none for @op)."""
        return []

    def epilogue(self, line: int) -> list[cst.BaseStatement]:
        """Statements appended to the body (none for @op)."""
        return []
