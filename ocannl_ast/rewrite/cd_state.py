"""@cd state: who owns an inline node, and inline nodes declared inside loops.

Input: the original CST of a @cd `def`. Output: the owner candidates of its declarations
(the names a node's `owner=` keyword lists), the loop targets enclosing a declaration, the
in-place form of a declaration made inside a loop (`(vel := __oc__.node("vel",
owner=(p,)))`: one node per iteration), and the decoration-time check that no statement
reads such a node before the iteration has declared it.

An inline node is *owned* by the first parameter tensor among its owner candidates: the
builders name it under that parameter (`"p1/vel"`), so a custom optimizer's state is named
after the parameter it belongs to rather than by declaration order.
"""

from __future__ import annotations

from collections.abc import Sequence

import libcst as cst

from ocannl_ast.rewrite import build
from ocannl_ast.rewrite.declarations import Declaration, hoisted_statement
from ocannl_ast.rewrite.source import Locator

_NODE_ATTRS = ("grad", "value")


class _OwnerFinder(cst.CSTVisitor):
    """Names `p` in `p.grad`, `p.value`, `p -= e`, `p[...] = e`, in source order."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def _add(self, node: cst.BaseExpression) -> None:
        if isinstance(node, cst.Name) and node.value not in self.found:
            self.found.append(node.value)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if node.attr.value in _NODE_ATTRS:
            self._add(node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._add(node.target)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        if isinstance(node.target, cst.Subscript):
            self._add(node.target.value)


def owner_candidates(root: cst.FunctionDef, params: set[str], bound: set[str]) -> list[str]:
    """The function's parameters that are updated or whose `.grad`/`.value` is read (not
    rebound in the body): a hoisted declaration's owner is the first of them that holds a
    parameter tensor when the function runs."""
    finder = _OwnerFinder()
    root.body.visit(finder)
    return [n for n in finder.found if n in params and n not in bound]


def target_names(target: cst.BaseExpression) -> list[str]:
    """The names a `for` target binds, in order (`for i, p in enumerate(ps)`: i, p)."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in target_names(el.value)]
    if isinstance(target, cst.StarredElement):
        return target_names(target.value)
    return []


def owner_field(names: Sequence[str]) -> tuple[str, cst.BaseExpression]:
    """`owner=(a, b)`: the candidates, tried in order when the node is created."""
    elements = [cst.Element(build.name(n)) for n in names]
    if len(elements) == 1:
        elements = [elements[0].with_changes(comma=cst.Comma())]
    return "owner", cst.Tuple(elements)


def in_place(decl: Declaration, updated: cst.Set) -> cst.NamedExpr:
    """`(name := __oc__.node("name", ...))`: a loop declaration, created where it stands."""
    call = cst.ensure_type(hoisted_statement(decl).body[0], cst.Assign).value
    return cst.NamedExpr(
        target=build.name(decl.name), value=call,
        lpar=[cst.LeftParen(), *updated.lpar], rpar=[*updated.rpar, cst.RightParen()],
    )


class _Reads(cst.CSTVisitor):
    """Every Name node of the body, but not attribute fields nor keyword names."""

    def __init__(self, names: set[str]) -> None:
        super().__init__()
        self.names = names
        self.found: list[cst.Name] = []

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in self.names:
            self.found.append(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Set(self, node: cst.Set) -> bool:
        return False  # the declaration itself


def check_loop_reads(
    root: cst.FunctionDef, decls: Sequence[Declaration], loc: Locator
) -> None:
    """A node declared inside a loop exists from its declaration on, once per iteration: a
    read placed before the declaration would see no node (first iteration) or the previous
    iteration's node, so it is rejected at decoration."""
    if not decls:
        return
    first = {d.name: loc.positions[d.origin].start for d in decls}
    reads = _Reads(set(first))
    root.body.visit(reads)
    for ref in reads.found:
        start = loc.positions[ref].start
        decl_at = first[ref.value]
        if (start.line, start.column) < (decl_at.line, decl_at.column):
            line = loc.lines(next(d.origin for d in decls if d.name == ref.value))[0]
            raise loc.error(
                ref,
                f"`{ref.value}` is declared inside a loop (line {line}), so each iteration "
                "gets its own node, created at the declaration: read it after `{"
                f"{ref.value}" "}[...] = ...`, or declare it before the loop to share one "
                "node across iterations",
            )
