"""Syntax whitelist: the statement and expression kinds each dialect accepts (STYLE 10).

Input: the original CST of a decorated function. Output: nothing, or a located
DslSyntaxError at the first node whose kind the dialect does not support. Semantic checks
(targets, reducers, declarations) belong to the transformers; this stage only gates kinds.
"""

from __future__ import annotations

import libcst as cst

from ocannl_ast.rewrite.source import Locator

_COMMON_STATEMENTS: frozenset[type[cst.CSTNode]] = frozenset(
    {
        cst.If, cst.For, cst.While, cst.FunctionDef,
        cst.Expr, cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Return, cst.Pass, cst.Break,
        cst.Continue, cst.Assert, cst.Raise, cst.Import, cst.ImportFrom, cst.Nonlocal,
    }
)
#: @op bodies are ordinary Python building tensors: try/with/del are harmless there.
_STATEMENTS: dict[str, frozenset[type[cst.CSTNode]]] = {
    "op": _COMMON_STATEMENTS | {cst.Try, cst.With, cst.Del},
    "cd": _COMMON_STATEMENTS,
}
_EXPRESSIONS: frozenset[type[cst.CSTNode]] = frozenset(
    {
        cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.BinaryOperation,
        cst.UnaryOperation, cst.BooleanOperation, cst.Comparison, cst.IfExp, cst.Lambda,
        cst.Integer, cst.Float, cst.Imaginary, cst.SimpleString, cst.ConcatenatedString,
        cst.FormattedString, cst.List, cst.Tuple, cst.Set, cst.Dict, cst.ListComp,
        cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.NamedExpr, cst.Ellipsis,
        cst.StarredElement,
    }
)
#: (what, why) for the kinds users are most likely to try.
_REASONS: dict[type[cst.CSTNode], tuple[str, str]] = {
    cst.Global: ("`global`", "the body runs with its own globals mapping"),
    cst.ClassDef: ("class definitions", "define the class outside the decorated function"),
    cst.Match: ("`match` statements", "use if/elif"),
    cst.TryStar: ("`try`/`except*`", "handle errors outside the decorated function"),
    cst.Try: ("`try`", "collected code cannot be rolled back"),
    cst.With: ("`with`", "collected code cannot be scoped by a context manager"),
    cst.Del: ("`del`", "tensors and declarations live as long as the code"),
    cst.Yield: ("`yield`", "a decorated function cannot be a generator"),
    cst.Await: ("`await`", "a decorated function cannot be a coroutine"),
}


def _kind_name(node: cst.CSTNode) -> str:
    return type(node).__name__


class _Checker(cst.CSTVisitor):
    def __init__(self, kind: str, locator: Locator) -> None:
        super().__init__()
        self.kind = kind
        self.locator = locator

    def _reject(self, node: cst.CSTNode, what: str, why: str = "") -> None:
        what, why = _REASONS.get(type(node), (what, why))
        message = f"{what} is not supported in a @{self.kind} body"
        raise self.locator.error(node, f"{message}: {why}" if why else message)

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            if type(node) not in _STATEMENTS[self.kind]:
                self._reject(node, f"{_kind_name(node)} statements")
            if getattr(node, "asynchronous", None) is not None:
                self._reject(node, "async functions, loops and with-blocks")
        elif isinstance(node, cst.BaseExpression) and type(node) not in _EXPRESSIONS:
            self._reject(node, f"{_kind_name(node)} expressions")
        return True


def check_syntax(funcdef: cst.FunctionDef, kind: str, locator: Locator) -> None:
    """Raise DslSyntaxError at the first unsupported statement or expression in the body."""
    funcdef.body.visit(_Checker(kind, locator))
