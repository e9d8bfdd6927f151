"""Source stage: read a decorated function's text, parse it with libcst, locate CST nodes.

Input: a function object (or a source string). Output: a `ParsedFunction` holding the CST of
its `def` and a `Locator` turning any original node into an absolute `Span` (file, line,
column, text) — the position every DslSyntaxError carries. Reading the source needs no
libcst (it is imported when parsing starts), so a rewrite-cache hit never loads it.
"""

from __future__ import annotations

import inspect
import linecache
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ocannl_ast.errors import DslSyntaxError, Span, user_span
from ocannl_ast.records import record

if TYPE_CHECKING:
    import libcst as cst
    from libcst.metadata import CodeRange

#: Prepended to an indented snippet so that it parses without dedenting (columns stay exact).
_SHIM = "if 1:\n"


@record
class FunctionSource:
    """The text of one `def` (decorators included) and where it sits in its file."""

    text: str  #: source lines as read, original indentation kept
    filename: str  #: file name as Python reports it (co_filename)
    first_line: int  #: 1-based absolute line of the first line of `text`


@record
class ParsedFunction:
    """A parsed `def`: the module holding it (shimmed when indented) and the def itself."""

    source: FunctionSource
    module: cst.Module  #: parse of `text`, or of `_SHIM + text` when `indent` is non-empty
    funcdef: cst.FunctionDef  #: the function definition inside `module`
    indent: str  #: leading whitespace of the `def` block ("" at module level)
    code_lines: tuple[str, ...]  #: lines of the parsed code (shim included)

    @property
    def shim_lines(self) -> int:
        """Synthetic lines before the user's text in `module`."""
        return 1 if self.indent else 0


def unreadable(fn: object, why: str) -> DslSyntaxError:
    """A DslSyntaxError for a function whose source cannot be used, located at its def."""
    code = getattr(fn, "__code__", None)
    span = Span(code.co_filename, code.co_firstlineno) if code is not None else None
    return DslSyntaxError(why, span)


def _at_decorator(why: str) -> DslSyntaxError:
    """A DslSyntaxError located where the user applies the decorator (its `@` line: the
    frame applying a decorator stands on it), for an object that is no plain function."""
    return DslSyntaxError(why, user_span())


def check_function(fn: object, decorator: str) -> types.FunctionType:
    """`fn` itself when it is a plain `def` function the decorator can rewrite."""
    name = getattr(fn, "__qualname__", repr(fn))
    innermost = (f"@{decorator} must be the innermost decorator of {name} (closest to def): "
                 f"move @oc.{decorator} below the other decorators")
    if not isinstance(fn, types.FunctionType):
        why = f"@{decorator} applies to a function defined with def; got {name}"
        if hasattr(fn, "__wrapped__"):  # another decorator's wrapper, or a staticmethod
            why += (f" wrapping one: @{decorator} must be the innermost decorator (closest to "
                    f"def): move @oc.{decorator} below the other decorators")
        raise _at_decorator(why)
    if fn.__name__ == "<lambda>":
        raise unreadable(fn, f"@{decorator} cannot rewrite a lambda: define it with def")
    if hasattr(fn, "__wrapped__"):
        raise _at_decorator(innermost)
    return fn


def read_source(fn: types.FunctionType, decorator: str) -> FunctionSource:
    """The source of a plain function, read with inspect (decorators included).

    Example: ``read_source(f, "op").first_line`` is the line of f's first decorator.
    """
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as exc:
        raise unreadable(
            fn,
            f"@{decorator} cannot read the source of {fn.__qualname__} ({exc}); functions "
            "created by exec/eval or typed at an interactive prompt cannot be rewritten",
        ) from None
    return FunctionSource("".join(lines), fn.__code__.co_filename, max(first, 1))


def key_source(fn: types.FunctionType) -> FunctionSource | None:
    """The lines of `fn` that its code covers -- its first decorator's line to the last line
    of its last expression, nested functions included -- read from linecache without
    tokenizing (`read_source` tokenizes up to the end of the block; the lines past the last
    expression are comments or blank), and the parameters. The rewrite cache keys on
    these; None when they cannot be read (then `read_source` reports why)."""
    code = fn.__code__
    first, last = code.co_firstlineno, 0
    codes = [code]
    while codes:
        c = codes.pop()
        for line, end, _, _ in c.co_positions():
            last = max(last, end or line or 0)
        codes.extend(k for k in c.co_consts if isinstance(k, types.CodeType))
    linecache.checkcache(code.co_filename)
    lines = linecache.getlines(code.co_filename, fn.__globals__)
    if not 1 <= first <= last <= len(lines):
        return None
    while last < len(lines) and not any(  # no code past the decorators (a docstring
            ln.lstrip().startswith(("def ", "async def ")) for ln in lines[first - 1 : last]):
        last += 1  # alone): up to its `def` line, the signature added below
    signature = (f"\0{code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]}"
                 f"{code.co_posonlyargcount},{code.co_kwonlyargcount}")
    return FunctionSource("".join(lines[first - 1 : last]) + signature, code.co_filename, first)


def _leading_ws(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def parse_function(source: FunctionSource, decorator: str) -> ParsedFunction:
    """Parse the single `def` in `source` (indented snippets get a one-line shim, no dedent)."""
    import libcst as cst

    first = source.text.split("\n", 1)[0]
    indent = _leading_ws(first)
    code = _SHIM + source.text if indent else source.text
    try:
        module = cst.parse_module(code)
    except cst.ParserSyntaxError as exc:
        line = source.first_line + exc.raw_line - 1 - (1 if indent else 0)
        raise DslSyntaxError(
            f"cannot parse the source of the @{decorator} function: {exc.message}",
            Span(source.filename, line, max(exc.raw_column, 0)),
        ) from None
    body: list[cst.BaseStatement] = list(module.body)
    if indent and len(body) == 1 and isinstance(body[0], cst.If):
        block = body[0].body
        body = list(block.body) if isinstance(block, cst.IndentedBlock) else []
    if len(body) != 1 or not isinstance(body[0], cst.FunctionDef):
        raise DslSyntaxError(
            f"@{decorator} expects the source to hold exactly one function definition",
            Span(source.filename, source.first_line, len(indent), first.strip()),
        )
    return ParsedFunction(source, module, body[0], indent, tuple(code.split("\n")))


class Locator:
    """Maps nodes of the original CST to absolute spans in the user's file."""

    def __init__(self, parsed: ParsedFunction) -> None:
        from libcst.metadata import MetadataWrapper, PositionProvider

        self.parsed = parsed
        wrapper = MetadataWrapper(parsed.module, unsafe_skip_copy=True)
        self.positions: Mapping[cst.CSTNode, CodeRange] = wrapper.resolve(PositionProvider)

    def _absolute(self, code_line: int) -> int:
        src = self.parsed.source
        return src.first_line + code_line - 1 - self.parsed.shim_lines

    def lines(self, node: cst.CSTNode) -> tuple[int, int]:
        """Absolute first and last line of an original node."""
        rng = self.positions[node]
        return self._absolute(rng.start.line), self._absolute(rng.end.line)

    def range(self, node: cst.CSTNode) -> tuple[int, int, int, int]:
        """Absolute (line, column, end line, end column) of an original node."""
        rng = self.positions[node]
        return (self._absolute(rng.start.line), rng.start.column,
                self._absolute(rng.end.line), rng.end.column)

    def text(self, node: cst.CSTNode) -> str:
        """The node's own source text (whitespace around it excluded)."""
        rng = self.positions[node]
        lines = self.parsed.code_lines[rng.start.line - 1 : rng.end.line]
        if not lines:
            return ""
        if len(lines) == 1:
            return lines[0][rng.start.column : rng.end.column]
        return "\n".join([lines[0][rng.start.column :], *lines[1:-1], lines[-1][: rng.end.column]])

    def span(self, node: cst.CSTNode) -> Span:
        """Where `node` starts: file, absolute line, column, and its text."""
        rng = self.positions[node]
        line = self._absolute(rng.start.line)
        return Span(self.parsed.source.filename, line, rng.start.column, self.text(node))

    def error(self, node: cst.CSTNode, message: str) -> DslSyntaxError:
        """A DslSyntaxError located at `node` (raise it); when the file cannot be read back
        for the excerpt (e.g. "<string>"), the message quotes the offending text."""
        span = self.span(node)
        if span.text and not span.excerpt():
            message = f"{message} (at `{span.text.splitlines()[0].strip()}`)"
        return DslSyntaxError(message, span)
