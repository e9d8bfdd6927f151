"""Codegen stage: compile a transformed `def` so that it reports the user's own lines.

Input: the transformed FunctionDef, the line range each emitted statement stands for, and
the original function's free variables. Output: the code object of the new function, with
the original file name; every AST position is mapped back onto the user's lines (columns
kept where the line is unchanged; on a rewritten line an expression takes the span of the
user expression it replaces, or of those it contains; the whole line otherwise).
"""

from __future__ import annotations
import __future__

import ast
import types
from collections.abc import Mapping
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from ocannl_ast.errors import Span
from ocannl_ast.rewrite.source import ParsedFunction
from ocannl_ast.rewrite.transform_base import LineTable, OriginTable

FACTORY = "__oc_factory__"
FUTURE_FLAGS = 0
for _feature in __future__.all_feature_names:
    FUTURE_FLAGS |= getattr(__future__, _feature).compiler_flag


@dataclass(frozen=True, slots=True)
class Rewritten:
    """A transformed function ready to compile."""

    parsed: ParsedFunction  #: the original parse (file, lines, indentation)
    funcdef: cst.FunctionDef  #: the transformed def (decorators stripped)
    lines: LineTable  #: emitted statement -> user line range
    origins: OriginTable = field(default_factory=dict)  #: emitted expression -> user range
    spans: tuple[Span, ...] = ()  #: the user spans `__oc_spans__[k]` in the body refers to


def class_of(qualname: str) -> str | None:
    """The class a function is defined in, from its qualname (`K.m` -> `K`; None if none)."""
    parts = qualname.split(".")
    return parts[-2] if len(parts) > 1 and parts[-2] != "<locals>" else None


def render_module(
    rw: Rewritten, freevars: tuple[str, ...], class_name: str | None = None
) -> cst.Module:
    """The module to compile: the def, inside a factory taking the free variables if nested.

    The factory keeps the def's original indentation, so unchanged lines render identically
    to the user's file, and makes the free variables closure cells of the inner function.
    A method is compiled inside a class of the same name, so that private names are mangled
    as in the original and zero-argument super() finds its `__class__` cell.
    """
    parsed = rw.parsed
    body: cst.BaseCompoundStatement = rw.funcdef
    indent = parsed.indent or "    "
    if class_name is not None:
        outer = indent[: len(indent) // 2] or " "
        inner = indent[len(outer) :] or " "
        block = cst.IndentedBlock(body=[rw.funcdef], indent=inner)
        body, indent = cst.ClassDef(name=cst.Name(class_name), body=block), outer
        freevars = tuple(v for v in freevars if v != "__class__")
    if parsed.indent or freevars or class_name is not None:
        params = cst.Parameters(params=[cst.Param(cst.Name(v)) for v in freevars])
        block = cst.IndentedBlock(body=[body], indent=indent)
        body = cst.FunctionDef(name=cst.Name(FACTORY), params=params, body=block)
    return cst.Module(
        body=[body],
        default_indent=parsed.module.default_indent,
        default_newline=parsed.module.default_newline,
    )


def line_map(
    rw: Rewritten, positions: Mapping[cst.CSTNode, CodeRange], n_lines: int
) -> list[int]:
    """User line for each rendered line (index = rendered line number; index 0 unused)."""
    default = rw.lines.get(id(rw.funcdef), (rw.funcdef, rw.parsed.source.first_line, 0))[1]
    out = [default] * (n_lines + 2)
    entries = []
    for node, first, last in rw.lines.values():
        rng = positions.get(node)
        if rng is not None:
            size = rng.end.line - rng.start.line
            entries.append((size, rng.start.line, rng.end.line, first, last))
    for _, start, end, first, last in sorted(entries, reverse=True):  # outer first
        for r in range(start, end + 1):
            out[r] = min(first + (r - start), max(last, first))
    return out


Range = tuple[int, int, int, int]  #: line, column, end line, end column (characters)


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode()[:byte_col].decode(errors="ignore"))


def _byte_col(line: str, char_col: int) -> int:
    return len(line[:char_col].encode())


class _Origins:
    """Rendered ranges of emitted expressions -> the user ranges of what they replace."""

    def __init__(self, rw: Rewritten, positions: Mapping[cst.CSTNode, CodeRange]) -> None:
        self.exact: dict[Range, Range] = {}
        for node, user in rw.origins.values():
            rng = positions.get(node)
            if rng is not None:
                key = (rng.start.line, rng.start.column, rng.end.line, rng.end.column)
                self.exact.setdefault(key, user)
        self.entries = sorted(self.exact.items())

    def find(self, r: Range) -> Range | None:
        """The user range of the rendered range `r`: its own origin, or else the span of
        the origins of the expressions inside it (a call the rewriter built around them)."""
        found = self.exact.get(r)
        if found is not None:
            return found
        inside = [u for k, u in self.entries if k[:2] >= r[:2] and k[2:] <= r[2:]]
        if not inside:
            return None
        start = min(u[:2] for u in inside)
        end = max(u[2:] for u in inside)
        return (*start, *end)


class _Positions:
    """Moves AST positions from rendered lines to the user's lines."""

    def __init__(self, rendered: list[str], user: Mapping[int, str], lines: list[int],
                 origins: _Origins | None = None) -> None:
        self.rendered = rendered
        self.user = user
        self.lines = lines
        self.origins = origins

    def _from_origin(self, node: ast.AST, r0: int, r1: int) -> bool:
        """Position a node of a rewritten line at the user expression it stands for."""
        b0, b1 = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
        if self.origins is None or b0 is None or b1 is None or self._same(r0, self.lines[r0]):
            return False
        rendered = (r0, _char_col(self.rendered[r0 - 1], b0),
                    r1, _char_col(self.rendered[r1 - 1], b1))
        user = self.origins.find(rendered)
        if user is None:
            return False
        u0, c0, u1, c1 = user
        node.lineno, node.end_lineno = u0, u1  # type: ignore[attr-defined]
        node.col_offset = _byte_col(self.user.get(u0, ""), c0)  # type: ignore[attr-defined]
        node.end_col_offset = _byte_col(self.user.get(u1, ""), c1)  # type: ignore[attr-defined]
        return True

    def _same(self, r: int, u: int) -> bool:
        return 0 < r <= len(self.rendered) and self.rendered[r - 1] == self.user.get(u)

    def fix(self, node: ast.AST) -> None:
        r0 = getattr(node, "lineno", None)
        if r0 is None:
            return
        r1 = getattr(node, "end_lineno", None) or r0
        if self._from_origin(node, r0, r1):
            return
        u0, u1 = self.lines[r0], self.lines[r1]
        u1 = max(u0, u1)
        text0, text1 = self.user.get(u0, ""), self.user.get(u1, "")
        if not self._same(r0, u0):
            node.col_offset = len(text0.encode()) - len(text0.lstrip().encode())  # type: ignore[attr-defined]
        if getattr(node, "end_col_offset", None) is not None and not self._same(r1, u1):
            node.end_col_offset = len(text1.rstrip().encode())  # type: ignore[attr-defined]
        node.lineno, node.end_lineno = u0, u1  # type: ignore[attr-defined]
        end_col = getattr(node, "end_col_offset", None)
        if u0 == u1 and end_col is not None and end_col < node.col_offset:  # type: ignore[attr-defined]
            node.end_col_offset = node.col_offset  # type: ignore[attr-defined]


def _find_code(code: types.CodeType, name: str, depth: int) -> types.CodeType | None:
    """The function code `name` at nesting `depth` (module=0; factory, class add levels)."""
    for const in code.co_consts:
        if not isinstance(const, types.CodeType):
            continue
        if depth == 1 and const.co_name == name:
            return const
        if depth > 1:
            found = _find_code(const, name, depth - 1)
            if found is not None:
                return found
    return None


def compile_function(
    rw: Rewritten, freevars: tuple[str, ...], flags: int = 0, class_name: str | None = None
) -> types.CodeType:
    """The code object of the transformed function, positioned on the user's lines."""
    module = render_module(rw, freevars, class_name)
    text = module.code
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    rendered = text.split("\n")
    lines = line_map(rw, positions, len(rendered))
    src = rw.parsed.source
    user = {src.first_line + k: line for k, line in enumerate(src.text.split("\n"))}
    tree = ast.parse(text, src.filename)
    fixer = _Positions(rendered, user, lines, _Origins(rw, positions))
    for node in ast.walk(tree):
        fixer.fix(node)
    code = compile(tree, src.filename, "exec", flags=flags & FUTURE_FLAGS, dont_inherit=True)
    depth = 1 + (module.body[0] is not rw.funcdef) + (class_name is not None)
    found = _find_code(code, rw.funcdef.name.value, depth)
    if found is None:
        raise RuntimeError(f"compiled module holds no function {rw.funcdef.name.value}")
    return found
