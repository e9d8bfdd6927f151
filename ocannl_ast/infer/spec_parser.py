"""Einsum spec parser (infer, first stage): spec text -> `spec_ast` dataclasses.

Input: an einsum spec "rhs1;rhs2;...=>lhs" or one shape spec "batch|input->output".
Output: `EinsumSpec` / `ShapeSpec`; malformed text raises `SpecError` with the 0-based column.
"""

from __future__ import annotations

import functools
from typing import NamedTuple, NoReturn

from ocannl_ast.errors import SpecError
from ocannl_ast.infer.spec_ast import (
    Affine,
    AxisSpec,
    Concat,
    Conv,
    EinsumSpec,
    FixedIndex,
    Label,
    RowSpec,
    ShapeSpec,
    Wildcard,
)

# Modes. A spec is in multi-char mode when it contains any of `, * + ^ <`, or a `=` that does
# not start `=>`; axes are then comma-separated identifiers (`[A-Za-z_][A-Za-z0-9_]*`; a lone
# `_` is the wildcard), an integer entry is a fixed index, and affine (`2*o<+k`) and
# concatenated (`a^b^3`) axes may be written. Otherwise it is in single-char mode: every
# letter is one axis, `_` is the wildcard, and a run of digits ("12") is one fixed index.
# Whitespace is ignored in both modes. Row variables are `...` (also `…`) and `..name..` in
# both modes. A plain `+` before a kernel (`o+k`) means valid mode, like `<+`.

__all__ = ["is_multichar", "parse_shape_spec", "parse_spec", "spec_labels", "spec_row_vars"]

_WHITESPACE = frozenset(" \t\r\n")
_MULTICHAR_TRIGGERS = frozenset(",*+^<")
_PUNCT = {
    ",": "COMMA",
    "|": "PIPE",
    ";": "SEMI",
    "+": "PLUS",
    "*": "STAR",
    "^": "CARET",
    "<": "LT",
}
_TWO_CHAR = {"->": "ARROW", "=>": "DARROW"}
_ROW_END = frozenset({"PIPE", "ARROW", "SEMI", "DARROW", "EOF"})
_DANGLING = _ROW_END | {"COMMA", "ELLIPSIS", "ROWVAR"}
_MAX_INT_DIGITS = 18  #: longer integer literals are rejected (no meaningful index or stride)


class _Tok(NamedTuple):
    """A token: kind (IDENT INT WILD ELLIPSIS ROWVAR COMMA PIPE ARROW DARROW SEMI PLUS STAR
    CARET LT EQ EOF), 0-based column, and text (the name for ROWVAR)."""

    kind: str
    col: int
    text: str


def is_multichar(text: str) -> bool:
    """Whether `text` is in multi-char mode. Example: ``is_multichar("i,j=>i")`` is True."""
    for i, c in enumerate(text):
        if c in _MULTICHAR_TRIGGERS or (c == "=" and text[i + 1 : i + 2] != ">"):
            return True
    return False


def _is_word_char(c: str) -> bool:
    return c.isascii() and (c.isalnum() or c == "_")


def _scan_word(text: str, i: int) -> int:
    """End index of the run of `[A-Za-z0-9_]` characters starting at `i`."""
    while i < len(text) and _is_word_char(text[i]):
        i += 1
    return i


def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in _WHITESPACE:
        i += 1
    return i


def _fail(message: str, text: str, col: int) -> NoReturn:
    raise SpecError(message, text, col)


def _lex(text: str, multichar: bool) -> list[_Tok]:
    """Split `text` into tokens, ending with EOF at column len(text)."""
    toks: list[_Tok] = []
    i = 0
    while i < len(text):
        c = text[i]
        if c in _WHITESPACE:
            i += 1
            continue
        if c in ".…":
            tok, i = _lex_dots(text, i)
        elif _is_word_char(c):
            tok, i = _lex_word(text, i, multichar)
        else:
            tok, i = _lex_punct(text, i)
        toks.append(tok)
    toks.append(_Tok("EOF", len(text), ""))
    return toks


def _lex_punct(text: str, i: int) -> tuple[_Tok, int]:
    pair = text[i : i + 2]
    if pair in _TWO_CHAR:
        return _Tok(_TWO_CHAR[pair], i, pair), i + 2
    c = text[i]
    if c == "=":
        return _Tok("EQ", i, c), i + 1
    if c in _PUNCT:
        return _Tok(_PUNCT[c], i, c), i + 1
    _fail(f"unexpected character {c!r}", text, i)


def _lex_word(text: str, i: int, multichar: bool) -> tuple[_Tok, int]:
    """An integer literal, an identifier (multi-char mode), a letter or `_` (single-char)."""
    c = text[i]
    if c.isdigit():
        j = i
        while j < len(text) and text[j].isascii() and text[j].isdigit():
            j += 1
        if multichar and j < len(text) and _is_word_char(text[j]):
            _fail("an identifier cannot start with a digit", text, i)
        if j - i > _MAX_INT_DIGITS:
            _fail("integer literal too long", text, i)
        return _Tok("INT", i, text[i:j]), j
    j = _scan_word(text, i) if multichar else i + 1
    word = text[i:j]
    return _Tok("WILD" if word == "_" else "IDENT", i, word), j


def _lex_dots(text: str, i: int) -> tuple[_Tok, int]:
    """`...` / `…` (the ellipsis) or `..name..` (a named row variable)."""
    if text[i] == "…":
        return _Tok("ELLIPSIS", i, "…"), i + 1
    if text.startswith("...", i):
        return _Tok("ELLIPSIS", i, "..."), i + 3
    if not text.startswith("..", i):
        _fail("unexpected '.': a row variable is '...' or '..name..'", text, i)
    j = _skip_ws(text, i + 2)
    end = _scan_word(text, j)
    name = text[j:end]
    if not name:
        _fail("expected a row-variable name after '..'", text, j)
    if name[0].isdigit():
        _fail("a row-variable name cannot start with a digit", text, j)
    if name == "_":
        _fail("'_' cannot name a row variable", text, j)
    k = _skip_ws(text, end)
    if not text.startswith("..", k):
        _fail(f"unbalanced '..{name}..': expected a closing '..'", text, i)
    return _Tok("ROWVAR", i, name), k + 2


def _describe(tok: _Tok) -> str:
    if tok.kind == "ROWVAR":
        return repr(f"..{tok.text}..")
    return "the end of the spec" if tok.kind == "EOF" else repr(tok.text)


class _Parser:
    """Recursive descent over the tokens of one spec; records label and row-variable uses."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.multichar = is_multichar(text)
        self.toks = _lex(text, self.multichar)
        self.pos = 0
        self.labels: list[tuple[str, int]] = []
        self.row_vars: list[tuple[str, int]] = []

    def peek(self) -> _Tok:
        return self.toks[self.pos]

    def advance(self) -> _Tok:
        tok = self.toks[self.pos]
        if tok.kind != "EOF":
            self.pos += 1
        return tok

    def fail(self, message: str, col: int) -> NoReturn:
        _fail(message, self.text, col)

    # -- spec and shape level ------------------------------------------------------------

    def einsum(self) -> EinsumSpec:
        if self.peek().kind == "EOF":
            self.fail("empty spec", 0)
        self.check_arrow()
        operands: list[ShapeSpec] = []
        while True:
            operands.append(self.operand())
            tok = self.advance()
            if tok.kind == "DARROW":
                break
            if tok.kind == "EOF":
                self.fail("missing '=>': a spec is 'rhs1;rhs2;...=>lhs'", tok.col)
        result = self.shape()
        tok = self.peek()
        if tok.kind == "SEMI":
            self.fail("';' after '=>': the result is a single shape", tok.col)
        if tok.kind == "DARROW":
            self.fail("'=>' written twice", tok.col)
        self.check_names()
        return EinsumSpec(tuple(operands), result, self.text)

    def check_arrow(self) -> None:
        """A spec with no `=>` but a `=` that starts no padded kernel (`=+`): the `=>` is
        mistyped (`ik;kj=ij`), not a convolution."""
        if any(t.kind == "DARROW" for t in self.toks):
            return
        for tok, nxt in zip(self.toks, self.toks[1:]):
            if tok.kind == "EQ" and nxt.kind != "PLUS":
                self.fail("expected '=>', found '=': a spec is 'rhs1;rhs2;...=>lhs'", tok.col)

    def operand(self) -> ShapeSpec:
        tok = self.peek()
        if tok.kind in ("SEMI", "DARROW", "EOF"):
            self.fail("empty operand", tok.col)
        return self.shape()

    def shape_only(self) -> ShapeSpec:
        tok = self.peek()
        if tok.kind == "EOF":
            self.fail("empty shape spec", 0)
        shape = self.shape()
        tok = self.peek()
        if tok.kind != "EOF":
            self.fail(f"unexpected {_describe(tok)} in a shape spec", tok.col)
        self.check_names()
        return shape

    def shape(self) -> ShapeSpec:
        """`batch|input->output`, `batch|output`, `input->output` or `output`."""
        rows = [self.row()]
        seps: list[str] = []
        while self.peek().kind in ("PIPE", "ARROW"):
            tok = self.advance()
            if tok.kind in seps:
                self.fail(f"'{tok.text}' written twice in one shape", tok.col)
            if tok.kind == "PIPE" and seps:
                self.fail("'|' must come before '->'", tok.col)
            seps.append(tok.kind)
            rows.append(self.row())
        if seps == ["PIPE", "ARROW"]:
            return ShapeSpec(rows[0], rows[1], rows[2])
        if seps == ["PIPE"]:
            return ShapeSpec(rows[0], None, rows[1])
        if seps == ["ARROW"]:
            return ShapeSpec(None, rows[0], rows[1])
        return ShapeSpec(None, None, rows[0])

    def row(self) -> RowSpec:
        """Axes, at most one row variable, axes; commas separate axes in multi-char mode."""
        beg: list[AxisSpec] = []
        axes: list[AxisSpec] = []
        var: str | None = None
        prev = ""  # "", "axis", "var" or "comma": what the last element was
        while (tok := self.peek()).kind not in _ROW_END:
            if tok.kind == "COMMA":
                if prev in ("", "comma"):
                    self.fail("unexpected ','", tok.col)
                prev = "comma"
            elif tok.kind in ("ELLIPSIS", "ROWVAR"):
                if var is not None:
                    self.fail("a row has at most one row variable", tok.col)
                var = "..." if tok.kind == "ELLIPSIS" else tok.text
                if tok.kind == "ROWVAR":
                    self.row_vars.append((tok.text, tok.col))
                beg, axes, prev = axes, [], "var"
            elif self.multichar and prev == "axis":
                self.fail(f"unexpected {_describe(tok)}: axes are separated by ','", tok.col)
            else:
                axes.append(self.axis())
                prev = "axis"
                continue
            self.advance()
        return RowSpec(tuple(beg), var, tuple(axes))

    def check_names(self) -> None:
        """A name is either a row variable or an axis label, never both in one spec."""
        first_var: dict[str, int] = {}
        for name, col in self.row_vars:
            first_var.setdefault(name, col)
        first_label: dict[str, int] = {}
        for name, col in self.labels:
            first_label.setdefault(name, col)
        clashes = [
            (max(first_var[n], first_label[n]), n) for n in first_var.keys() & first_label.keys()
        ]
        if clashes:
            col, name = min(clashes)
            self.fail(f"{name!r} is used both as a row variable and as an axis label", col)

    # -- axis level ----------------------------------------------------------------------

    def axis(self) -> AxisSpec:
        tok = self.advance()
        if tok.kind == "WILD":
            return Wildcard()
        if tok.kind not in ("IDENT", "INT"):
            self.fail(f"expected an axis, found {_describe(tok)}", tok.col)
        if not self.multichar:
            return self.label(tok) if tok.kind == "IDENT" else FixedIndex(int(tok.text))
        nxt = self.peek().kind
        if nxt == "CARET":
            return self.concat(tok)
        if nxt == "STAR" or (tok.kind == "IDENT" and nxt in ("PLUS", "LT", "EQ")):
            return self.affine(tok)
        if tok.kind == "INT":
            if nxt in ("PLUS", "LT", "EQ"):
                self.fail("an affine axis starts with 'stride*label' or 'label'", tok.col)
            return FixedIndex(int(tok.text))
        return self.label(tok)

    def label(self, tok: _Tok) -> Label:
        self.labels.append((tok.text, tok.col))
        return Label(tok.text)

    def expect_label(self, op: _Tok) -> _Tok:
        """The label after operator `op` (`*`, `+`, `^`)."""
        tok = self.advance()
        if tok.kind == "IDENT":
            self.labels.append((tok.text, tok.col))
            return tok
        if tok.kind in _DANGLING:
            self.fail(f"dangling '{op.text}': expected a label after it", op.col)
        self.fail(f"expected a label after '{op.text}', found {_describe(tok)}", tok.col)

    def coefficient(self, tok: _Tok, what: str) -> int:
        """A stride or dilation: a positive integer literal."""
        if tok.kind != "INT":
            self.fail(f"the {what} must be an integer literal, found {_describe(tok)}", tok.col)
        value = int(tok.text)
        if value < 1:
            self.fail(f"the {what} must be positive", tok.col)
        return value

    def affine(self, first: _Tok) -> Affine:
        """`[stride*]over[<|=][+offset][+[dilation*]kernel]`, at least one of the options (the
        offset may also come after the kernel)."""
        stride, over = 1, first
        if self.peek().kind == "STAR":
            stride = self.coefficient(first, "stride")
            over = self.expect_label(self.advance())
        else:
            self.labels.append((over.text, over.col))
        marker = self.peek() if self.peek().kind in ("LT", "EQ") else None
        if marker is not None:
            self.advance()
            if self.peek().kind != "PLUS":
                self.fail(f"expected '+' after '{marker.text}'", self.peek().col)
        offset, offset_col, conv = 0, -1, None
        if self.peek().kind == "PLUS":
            offset, offset_col, conv = self.affine_tail(marker)
        if conv is None and marker is not None:
            self.fail(f"'{marker.text}+' needs a kernel label after it", marker.col)
        if conv is None and offset >= stride:
            self.fail(f"the offset must be smaller than the stride ({stride})", offset_col)
        return Affine(stride, over.text, offset, conv)

    def affine_tail(self, marker: _Tok | None) -> tuple[int, int, Conv | None]:
        """After `over[<|=]`: `+offset`, `+[dilation*]kernel`, `+offset+[dilation*]kernel` or
        `+[dilation*]kernel+offset`."""
        plus = self.advance()
        tok = self.advance()
        offset, offset_col = 0, -1
        if tok.kind == "INT" and self.peek().kind != "STAR":
            offset, offset_col = int(tok.text), tok.col
            if self.peek().kind != "PLUS":
                return offset, offset_col, None
            plus = self.advance()
            tok = self.advance()
        if self.peek().kind == "STAR" and tok.kind in ("INT", "IDENT"):
            dilation = self.coefficient(tok, "dilation")
            kernel = self.expect_label(self.advance())
        elif tok.kind == "IDENT":
            dilation, kernel = 1, tok
            self.labels.append((tok.text, tok.col))
        elif tok.kind in _DANGLING:
            self.fail("dangling '+': expected an offset or a kernel label after it", plus.col)
        else:
            self.fail(f"expected an offset or a kernel label, found {_describe(tok)}", tok.col)
        if offset_col < 0 and self.peek().kind == "PLUS" and \
                self.toks[self.pos + 1].kind == "INT" and self.toks[self.pos + 2].kind != "STAR":
            self.advance()  # `over+kernel+offset`: the offset written last (as `x[o + k + 2]`)
            tok = self.advance()
            offset, offset_col = int(tok.text), tok.col
        use_padding = marker is not None and marker.kind == "EQ"
        return offset, offset_col, Conv(dilation, kernel.text, use_padding)

    def concat(self, first: _Tok) -> Concat:
        """`c1^c2^...`: components are labels or integers (sizes of anonymous blocks)."""
        comps: list[Label | int] = [self.component(first)]
        while self.peek().kind == "CARET":
            caret = self.advance()
            tok = self.advance()
            if tok.kind in ("IDENT", "INT"):
                comps.append(self.component(tok))
            elif tok.kind in _DANGLING:
                self.fail("dangling '^': expected a label or an integer after it", caret.col)
            else:
                self.fail(
                    f"concatenation components are labels or integers, found {_describe(tok)}",
                    tok.col,
                )
        if self.peek().kind in ("STAR", "PLUS", "LT", "EQ"):
            tok = self.peek()
            self.fail("concatenation components are labels or integers", tok.col)
        return Concat(tuple(comps))

    def component(self, tok: _Tok) -> Label | int:
        return self.label(tok) if tok.kind == "IDENT" else int(tok.text)


def parse_spec(text: str) -> EinsumSpec:
    """Parse `rhs1;rhs2;...=>lhs` (operands on the left). Raises SpecError (located at the
    user's line when an operation of this library parses on the user's behalf).

    Example: ``parse_spec("ij;jk=>ik").operands[1].output`` is
    ``RowSpec((), None, (Label("j"), Label("k")))``.
    """
    try:
        return _parse_spec(text)
    except SpecError as e:
        raise e from None


def parse_shape_spec(text: str) -> ShapeSpec:
    """Parse one `batch|input->output` shape spec. Raises SpecError.

    Example: ``parse_shape_spec("...|i->o").batch`` is ``RowSpec((), "...", ())``.
    """
    try:
        return _parse_shape_spec(text)
    except SpecError as e:
        raise e from None


@functools.lru_cache(maxsize=2048)
def _parse_spec(text: str) -> EinsumSpec:
    return _Parser(text).einsum()


@functools.lru_cache(maxsize=1024)
def _parse_shape_spec(text: str) -> ShapeSpec:
    return _Parser(text).shape_only()


def _shapes(spec: EinsumSpec) -> tuple[ShapeSpec, ...]:
    return (*spec.operands, spec.result)


def _rows(shape: ShapeSpec) -> list[RowSpec]:
    return [r for r in (shape.batch, shape.input, shape.output) if r is not None]


def _axis_labels(axis: AxisSpec) -> list[str]:
    if isinstance(axis, Label):
        return [axis.name]
    if isinstance(axis, Affine):
        return [axis.over] + ([axis.conv.kernel] if axis.conv is not None else [])
    if isinstance(axis, Concat):
        return [c.name for c in axis.components if isinstance(c, Label)]
    return []


def spec_labels(spec: EinsumSpec) -> frozenset[str]:
    """Every axis label (dimension variable) of the spec, incl. affine and concat parts.

    Example: ``spec_labels(parse_spec("2*o<+k; k => o"))`` is ``frozenset({"o", "k"})``.
    """
    return frozenset(
        name
        for shape in _shapes(spec)
        for row in _rows(shape)
        for axis in (*row.beg, *row.end)
        for name in _axis_labels(axis)
    )


def spec_row_vars(spec: EinsumSpec) -> frozenset[str]:
    """Every row-variable name of the spec ("..." included when the ellipsis is used)."""
    return frozenset(
        row.var for shape in _shapes(spec) for row in _rows(shape) if row.var is not None
    )
