"""Error hierarchy (leaf module): every error carries the source span of the user code
that built the failing operation, and prints that line with a caret under the column.
"""

from __future__ import annotations

import contextvars
import functools
import linecache
import os
import sys
import types

from .records import record


@record
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


def _char_col(line: str, byte_col: int) -> int:
    """A UTF-8 byte offset in `line` (as code positions count) as a character offset."""
    return len(line.encode()[:byte_col].decode(errors="ignore"))


_Positions = tuple[tuple[int | None, int | None, int | None, int | None], ...]
#: id(code) -> (code, its position table): the last few code objects looked up
_POSITIONS: dict[int, tuple[types.CodeType, _Positions]] = {}


def _positions(code: types.CodeType) -> _Positions:
    """`code`'s position table, one entry per instruction, kept for the next lookup: a
    script's module code builds every op of a model from one long code object, and
    walking its table anew for each op is quadratic."""
    got = _POSITIONS.get(id(code))
    if got is not None and got[0] is code:
        return got[1]
    if len(_POSITIONS) >= 64:
        _POSITIONS.clear()
    table = tuple(code.co_positions())
    _POSITIONS[id(code)] = (code, table)
    return table


#: (code, instruction offset, line) -> its span: a call site is located once (most are
#: reached again and again: a layer applied in a loop, an optimizer over every parameter)
_SPANS: dict[tuple[types.CodeType, int, int], Span] = {}
_SPANS_MAX = 8192


def frame_span(frame: types.FrameType) -> Span:
    """Where `frame` is now: its line and, from the code's position table (Python 3.11+),
    the column and text of the expression being evaluated (the call or operator)."""
    key = (frame.f_code, frame.f_lasti, frame.f_lineno)
    hit = _SPANS.get(key)
    if hit is None:
        if len(_SPANS) >= _SPANS_MAX:
            _SPANS.clear()
        hit = _SPANS[key] = _locate(frame)
    return hit


def _locate(frame: types.FrameType) -> Span:
    code = frame.f_code
    line, col, text = frame.f_lineno, 0, None
    table = _positions(code)
    at = max(frame.f_lasti, 0) // 2
    pos = table[at] if at < len(table) else None
    if pos is not None and pos[0] is not None and pos[2] is not None:
        line = pos[0]
        src = linecache.getline(code.co_filename, line).rstrip("\n")
        col = _char_col(src, pos[2])
        if pos[1] == line and pos[3] is not None:
            text = src[col:_char_col(src, pos[3])] or None
    return Span(code.co_filename, line, col, text)


@functools.lru_cache(maxsize=1024)
def _is_user(fname: str, skip_lib: bool) -> bool:
    absf = os.path.abspath(fname) if not fname.startswith("<") else fname
    return not (skip_lib and absf.startswith(_LIB_DIR)) and "importlib" not in fname


#: The span a rewritten @op/@cd statement passed explicitly to the builder running now.
_EXPLICIT: contextvars.ContextVar[Span | None] = contextvars.ContextVar("span", default=None)


class at:
    """Builders run a rewritten statement's work under `with at(span):` so that every error
    inside reports that statement (None: no explicit span, keep what is active). A class,
    not a generator: it runs for every assignment and operation built (hot)."""

    __slots__ = ("_span", "_token")

    def __init__(self, span: Span | None) -> None:
        self._span = span
        self._token: contextvars.Token[Span | None] | None = None

    def __enter__(self) -> None:
        if self._span is not None:
            self._token = _EXPLICIT.set(self._span)

    def __exit__(self, *exc: object) -> None:
        if self._token is not None:
            _EXPLICIT.reset(self._token)
            self._token = None


def user_span(skip_lib: bool = True) -> Span | None:
    """Where the user's code is building the failing operation: the span a rewritten
    statement passed explicitly (see `at`), else the one frame-position lookup for plain
    calls: the innermost stack frame outside this library (file, line, the column where the
    call or operator starts, its text).

    Example: ``user_span()`` called from library code returns the caller's file and line.
    """
    explicit = _EXPLICIT.get()
    if explicit is not None:
        return explicit
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        if _is_user(frame.f_code.co_filename, skip_lib):
            return frame_span(frame)
        frame = frame.f_back
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


class CheckpointError(OcannlError):
    """A checkpoint that does not match the context (a missing, extra, mis-shaped or
    wrong-dtype entry, named), or a file that cannot be read or written as one."""


class ArgumentError(OcannlError):
    """A public function got an argument of the wrong type or out of range: names the
    function, the parameter, what it accepts and what it got."""


class DistributedError(OcannlError):
    """Data-parallel ranks disagree (compiled code, flags or param values differ; names the
    routine or param and the ranks), or a peer died or timed out."""
