"""Name analysis for the rewriter: which names a function body binds, and where.

Input: a libcst FunctionDef (or its body). Output: name sets used to tell Python values from
index variables in named-index subscripts, and to refuse hoisting an inline declaration above
a binding it depends on. Targets are read the way the dialect rewrites them (`kind`).
"""

from __future__ import annotations

import libcst as cst


def param_names(params: cst.Parameters) -> list[str]:
    """Every parameter name, in order (positional-only, regular, *args, keyword-only, **kw)."""
    out = [p.name.value for p in (*params.posonly_params, *params.params)]
    if isinstance(params.star_arg, cst.Param):
        out.append(params.star_arg.name.value)
    out += [p.name.value for p in params.kwonly_params]
    if params.star_kwarg is not None:
        out.append(params.star_kwarg.name.value)
    return out


class _Collector(cst.CSTVisitor):
    """Records bound names; `deep` also enters nested functions, lambdas, comprehensions."""

    def __init__(self, kind: str, deep: bool) -> None:
        super().__init__()
        self.kind = kind
        self.deep = deep
        self.bound: dict[str, cst.CSTNode] = {}
        self._decl_walrus: set[int] = set()

    def _bind(self, name: cst.Name) -> None:
        self.bound.setdefault(name.value, name)

    def _bind_target(self, target: cst.BaseExpression, augmented: bool = False) -> None:
        if isinstance(target, cst.Name):
            if not (augmented and self.kind == "cd"):  # @cd `v += e` accumulates into v
                self._bind(target)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for el in target.elements:
                self._bind_target(el.value)
        elif isinstance(target, cst.StarredElement):
            self._bind_target(target.value)
        elif (
            isinstance(target, cst.Subscript)
            and self.kind == "op"
            and isinstance(target.value, cst.Name)
            and not augmented
        ):
            self._bind(target.value)  # @op `y[i] = ...` defines y

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self._bind(node.name)
        if self.deep:
            for name in param_names(node.params):
                self.bound.setdefault(name, node)
        return self.deep

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self._bind(node.name)
        return self.deep

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        if self.deep:
            for name in param_names(node.params):
                self.bound.setdefault(name, node)
        return self.deep

    def visit_CompFor(self, node: cst.CompFor) -> None:
        if self.deep:
            self._bind_target(node.target)

    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind_target(target.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._bind_target(node.target, augmented=True)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._bind_target(node.target)

    def visit_WithItem(self, node: cst.WithItem) -> None:
        if node.asname is not None:
            self._bind_target(node.asname.name)

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        if node.name is not None and isinstance(node.name.name, cst.Name):
            self._bind(node.name.name)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        if node.asname is not None and isinstance(node.asname.name, cst.Name):
            self._bind(node.asname.name)
        elif isinstance(node.name, cst.Name):
            self._bind(node.name)
        else:
            head: cst.BaseExpression = node.name
            while isinstance(head, cst.Attribute):
                head = head.value
            if isinstance(head, cst.Name):
                self._bind(head)

    def visit_Set(self, node: cst.Set) -> None:
        # `{w := 0.5, o := [h]}` is declaration syntax, not walrus bindings.
        for el in node.elements:
            if isinstance(el.value, cst.NamedExpr):
                self._decl_walrus.add(id(el.value))

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        if id(node) not in self._decl_walrus:
            self._bind_target(node.target)


def scope_bindings(fn: cst.FunctionDef, kind: str) -> set[str]:
    """Names local to `fn`'s own scope: its parameters and what its body binds (not nested)."""
    collector = _Collector(kind, deep=False)
    fn.body.visit(collector)
    return set(param_names(fn.params)) | set(collector.bound)


def body_bindings(fn: cst.FunctionDef, kind: str) -> dict[str, cst.CSTNode]:
    """Every name bound anywhere in `fn`'s body, nested scopes included, with its first binder.

    The function's own parameters are not included (they are bound before the body runs).
    """
    collector = _Collector(kind, deep=True)
    fn.body.visit(collector)
    return collector.bound
