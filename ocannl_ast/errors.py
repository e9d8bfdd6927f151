"""Error hierarchy (leaf module): every error carries the source span of the user code
that built the failing operation, and prints that line with a caret under the column.
"""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A position in user source code."""

    file: str  #: path of the source file (as Python reports it)
    line: int  #: 1-based line number
    col: int = 0  #: 0-based column
    text: str | None = None  #: the offending text, when known

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def excerpt(self) -> str:
        """The source line with a caret under the column, or '' if unavailable."""
        src = linecache.getline(self.file, self.line)
        if not src:
            return ""
        src = src.rstrip("\n")
        width = max(1, len(self.text)) if self.text and "\n" not in self.text else 1
        return f"    {src}\n    {' ' * self.col}{'^' * width}"


_LIB_DIR = os.path.dirname(os.path.abspath(__file__))


def user_span(skip_lib: bool = True) -> Span | None:
    """The innermost stack frame outside this library: the user line building an operation.

    Example: ``user_span()`` called from library code returns the caller's file and line.
    """
    frame = sys._getframe(1)
    while frame is not None:
        fname = frame.f_code.co_filename
        absf = os.path.abspath(fname) if not fname.startswith("<") else fname
        if not (skip_lib and absf.startswith(_LIB_DIR)) and "importlib" not in fname:
            return Span(fname, frame.f_lineno, 0)
        frame = frame.f_back  # type: ignore[assignment]
    return None


class OcannlError(Exception):
    """Base of all ocannl_ast errors; ``span`` locates the user code responsible."""

    def __init__(self, message: str, span: Span | None = None) -> None:
        self.message = message
        self.span = span
        super().__init__(self._render())

    def _render(self) -> str:
        if self.span is None:
            return self.message
        excerpt = self.span.excerpt()
        out = f"{self.span}: {self.message}"
        return f"{out}\n{excerpt}" if excerpt else out

    def with_span(self, span: Span | None) -> OcannlError:
        """Attach a span if this error has none yet (returns self for raising)."""
        if self.span is None and span is not None:
            self.span = span
            self.args = (self._render(),)
        return self


class ShapeError(OcannlError):
    """Shape or projection inference failed: names the operation, tensors, facts, source line."""


class SpecError(OcannlError):
    """A malformed einsum spec: shows the spec and a caret under the offending column."""

    def __init__(self, message: str, spec: str, col: int, span: Span | None = None) -> None:
        self.spec = spec
        self.col = col
        super().__init__(f"{message} (column {col + 1})\n    {spec}\n    {' ' * col}^", span)


class DslSyntaxError(OcannlError):
    """A decorated body the @op/@cd dialect cannot express: file:line:col and the text."""


class BackendError(OcannlError):
    """Compilation or execution in a backend failed (names the generated file)."""


class RuntimeDataError(OcannlError):
    """A routine reads a tensor that nobody set or computed, or host data has a wrong shape."""
