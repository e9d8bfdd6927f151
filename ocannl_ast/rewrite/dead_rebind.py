"""Dead rebindings in @cd: `p = p - lr * p.grad` binds a Python name and updates nothing.

Input: the original CST of a @cd `def` and its positions. Output: the plain assignments
`name = e` (in the function's own scope) whose new value no later statement can read: no
read after it, none inside an enclosing loop that does not rebind the name itself, none
in a nested function or lambda. The transformer wraps their value in
`__oc__.rebound(e, "name")`, which warns at the user's line when the value is a tensor (a
Python number rebound and never read again is none of the dialect's business).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
from libcst.metadata import CodePosition

from ocannl_ast.rewrite.cd_state import target_names
from ocannl_ast.rewrite.source import Locator


@dataclass(frozen=True, slots=True)
class _Loop:
    start: CodePosition
    end: CodePosition
    binds: frozenset[str]  #: names its `for` target rebinds on every iteration


@dataclass(frozen=True, slots=True)
class _Binding:
    node: cst.Assign
    name: str
    end: CodePosition
    loops: tuple[_Loop, ...]


def _pos(p: CodePosition) -> tuple[int, int]:
    return p.line, p.column


class _Scan(cst.CSTVisitor):
    """Reads of names (with positions), plain name assignments and their enclosing loops."""

    def __init__(self, loc: Locator) -> None:
        super().__init__()
        self.loc = loc
        self.reads: list[tuple[str, CodePosition]] = []
        self.nested_reads: set[str] = set()  # read inside a nested def or lambda
        self.nonlocal_names: set[str] = set()
        self.bindings: list[_Binding] = []
        self._loops: list[_Loop] = []
        self._depth = 0  # nested functions and lambdas

    def _read(self, node: cst.Name) -> None:
        if self._depth:
            self.nested_reads.add(node.value)
        else:
            self.reads.append((node.value, self.loc.positions[node].start))

    def visit_Name(self, node: cst.Name) -> None:
        self._read(node)

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Param(self, node: cst.Param) -> bool:
        if node.default is not None:
            node.default.visit(self)
        return False

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._depth += 1
        node.body.visit(self)
        for deco in node.decorators:
            deco.visit(self)
        self._depth -= 1
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        self._depth += 1
        node.body.visit(self)
        self._depth -= 1
        return False

    def visit_Nonlocal(self, node: cst.Nonlocal) -> bool:
        self.nonlocal_names.update(n.name.value for n in node.names)
        return False

    def _store(self, target: cst.BaseExpression) -> None:
        """Visit an assignment target: bare names are stores, anything else reads."""
        if isinstance(target, cst.Name):
            return
        if isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._store(el.value)
        elif isinstance(target, cst.StarredElement):
            self._store(target.value)
        else:
            target.visit(self)

    def visit_Assign(self, node: cst.Assign) -> bool:
        node.value.visit(self)
        for t in node.targets:
            self._store(t.target)
        only = node.targets[0].target if len(node.targets) == 1 else None
        if isinstance(only, cst.Name) and not self._depth:
            self.bindings.append(_Binding(node, only.value, self.loc.positions[node].end,
                                          tuple(self._loops)))
        return False

    def visit_For(self, node: cst.For) -> bool:
        node.iter.visit(self)
        self._store(node.target)
        rng = self.loc.positions[node]
        self._loops.append(_Loop(rng.start, rng.end, frozenset(target_names(node.target))))
        node.body.visit(self)
        self._loops.pop()
        if node.orelse is not None:
            node.orelse.visit(self)
        return False

    def visit_While(self, node: cst.While) -> bool:
        rng = self.loc.positions[node]
        self._loops.append(_Loop(rng.start, rng.end, frozenset()))
        node.test.visit(self)
        node.body.visit(self)
        self._loops.pop()
        if node.orelse is not None:
            node.orelse.visit(self)
        return False


def dead_rebindings(funcdef: cst.FunctionDef, loc: Locator) -> set[int]:
    """ids of the original `name = e` statements whose value is never read."""
    scan = _Scan(loc)
    funcdef.body.visit(scan)
    dead: set[int] = set()
    for b in scan.bindings:
        if b.name in scan.nested_reads or b.name in scan.nonlocal_names:
            continue
        reads = [_pos(p) for n, p in scan.reads if n == b.name]
        if any(r > _pos(b.end) for r in reads):
            continue
        if any(b.name not in loop.binds and any(_pos(loop.start) <= r <= _pos(loop.end)
                                                for r in reads) for loop in b.loops):
            continue
        dead.add(id(b.node))
    return dead
