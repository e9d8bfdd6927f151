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
_REASONS: dict[type[cst.CSTNode], str] = {
    cst.Global: "`global` is not supported: the body runs with its own globals mapping; "
    "keep module state outside the decorated function",
    cst.ClassDef: "class definitions are not supported inside a decorated body; "
    "define the class outside",
    cst.Match: "`match` statements are not supported; use if/elif",
    cst.TryStar: "`try`/`except*` is not supported; handle errors outside",
    cst.Try: "`try` is not supported in @cd bodies: collected code cannot be rolled back",
    cst.With: "`with` is not supported in @cd bodies",
    cst.Del: "`del` is not supported in @cd bodies",
    cst.Yield: "`yield` is not supported: a decorated function cannot be a generator",
    cst.Await: "`await` is not supported: a decorated function cannot be a coroutine",
}


def _kind_name(node: cst.CSTNode) -> str:
    return type(node).__name__


class _Checker(cst.CSTVisitor):
    def __init__(self, kind: str, locator: Locator) -> None:
        super().__init__()
        self.kind = kind
        self.locator = locator

    def _reject(self, node: cst.CSTNode, default: str) -> None:
        reason = _REASONS.get(type(node), default)
        raise self.locator.error(node, f"{reason} (in a @{self.kind} body)")

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, (cst.BaseSmallStatement, cst.BaseCompoundStatement)):
            if type(node) not in _STATEMENTS[self.kind]:
                self._reject(node, f"{_kind_name(node)} statements are not supported")
            if getattr(node, "asynchronous", None) is not None:
                self._reject(node, "async functions, loops and with-blocks are not supported")
        elif isinstance(node, cst.BaseExpression) and type(node) not in _EXPRESSIONS:
            self._reject(node, f"{_kind_name(node)} expressions are not supported")
        return True


def check_syntax(funcdef: cst.FunctionDef, kind: str, locator: Locator) -> None:
    """Raise DslSyntaxError at the first unsupported statement or expression in the body."""
    funcdef.body.visit(_Checker(kind, locator))
