"""Deterministic text form of the loop IR, for golden files and error messages.

Stage: debugging aid after lowering. Input: a `LoopProgram`. Output: indented text with
iterators renumbered i0, i1, ... in order of binding and static arguments named s_<name>.
"""

from __future__ import annotations

import math
from typing import assert_never

from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    CheckIndex,
    Comment,
    Const,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Noop,
    Precision,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    ThreefryUniform,
    Unary,
    UnOp,
)
from ocannl_ast.lowering.walk import fold_expr, walk_stmts

_INDENT = "  "

#: Infix spelling and precedence of binary ops printed as operators (others print as calls).
_INFIX: dict[BinOp, tuple[str, int]] = {
    BinOp.LT: ("<", 1),
    BinOp.LE: ("<=", 1),
    BinOp.EQ: ("==", 1),
    BinOp.NE: ("!=", 1),
    BinOp.ADD: ("+", 2),
    BinOp.SUB: ("-", 2),
    BinOp.MUL: ("*", 3),
    BinOp.DIV: ("/", 3),
    BinOp.POW: ("**", 5),
}
_PREC_NEG = 4
_PREC_ATOM = 6


class SymbolNames:
    """Renumbers symbols: static args keep `s_<name>`, iterators get i0, i1, ... on binding."""

    def __init__(self, static_args: tuple[Symbol, ...]) -> None:
        self._names: dict[Symbol, str] = {}
        self._n_iters = 0
        self._n_free = 0
        taken: set[str] = set()
        for sym in static_args:
            name, k = f"s_{sym.name}", 1
            while name in taken:
                name, k = f"s_{sym.name}_{k}", k + 1
            taken.add(name)
            self._names[sym] = name

    def bind(self, sym: Symbol) -> str:
        """The name of a loop iterator; a symbol re-bound by a sibling loop keeps its name."""
        if sym not in self._names:
            self._names[sym] = f"i{self._n_iters}"
            self._n_iters += 1
        return self._names[sym]

    def use(self, sym: Symbol) -> str:
        """The name of a used symbol; an unbound one (an IR error) is printed as u0, u1, ..."""
        if sym not in self._names:
            self._names[sym] = f"u{self._n_free}"
            self._n_free += 1
        return self._names[sym]


def format_number(value: float) -> str:
    """Shortest text of a constant: integral values without a fraction (``0``, ``-2``)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    if value.is_integer() and abs(value) < 1e16:
        return "-0" if math.copysign(1.0, value) < 0 and value == 0 else str(int(value))
    return repr(value)


def format_index(index: IndexExpr, names: SymbolNames) -> str:
    """``2*i0 - i1 + 1`` style text of an affine index."""
    parts: list[str] = []
    for coeff, sym in index.terms:
        mag = abs(coeff)
        term = names.use(sym) if mag == 1 else f"{mag}*{names.use(sym)}"
        if not parts:
            parts.append(term if coeff > 0 else f"-{term}")
        else:
            parts.append(f"+ {term}" if coeff > 0 else f"- {term}")
    if index.offset != 0 or not parts:
        if not parts:
            parts.append(str(index.offset))
        else:
            parts.append(f"+ {index.offset}" if index.offset > 0 else f"- {-index.offset}")
    return " ".join(parts)


def format_cell(name: str, index: tuple[IndexExpr, ...], names: SymbolNames) -> str:
    return f"{name}[{', '.join(format_index(e, names) for e in index)}]"


def _paren(text: str, prec: int, needed: int) -> str:
    return f"({text})" if prec < needed else text


Text = tuple[str, int]  #: an expression's text and its precedence


def _binary(e: Binary, lhs: Text, rhs: Text) -> Text:
    if e.op not in _INFIX:
        return f"{e.op.value}({lhs[0]}, {rhs[0]})", _PREC_ATOM
    sym, prec = _INFIX[e.op]
    # Left-associative operators need parentheses on an equal-precedence right operand
    # (float addition is not associative); `**` is right-associative; comparisons chain.
    left_need = prec + 1 if e.op is BinOp.POW or prec == 1 else prec
    right_need = prec if e.op is BinOp.POW else prec + 1
    return f"{_paren(*lhs, left_need)} {sym} {_paren(*rhs, right_need)}", prec


def _node_text(e: Expr, kids: list[Text], names: SymbolNames) -> Text:
    """Text of a node from its children's (for minimal parentheses)."""
    match e:
        case Const(value=v):
            return format_number(v), (_PREC_ATOM if v >= 0 or math.isnan(v) else _PREC_NEG)
        case Get(buffer=buf, index=index):
            return format_cell(buf.name, index, names), _PREC_ATOM
        case GetLocal(name=name):
            return name, _PREC_ATOM
        case SymbolValue(symbol=sym):
            return f"float({names.use(sym)})", _PREC_ATOM
        case Unary(op=UnOp.NEG):
            return f"-{_paren(*kids[0], _PREC_NEG + 1)}", _PREC_NEG
        case Unary(op=op):
            return f"{op.value}({kids[0][0]})", _PREC_ATOM
        case Binary():
            return _binary(e, kids[0], kids[1])
        case Ternary(op=op):
            return f"{op.value}({', '.join(k[0] for k in kids)})", _PREC_ATOM
        case ThreefryUniform(key=key, counter=counter):
            keys = ", ".join(f"0x{k:08x}" for k in key)
            return f"threefry_uniform(({keys}), {format_index(counter, names)})", _PREC_ATOM
        case _:
            assert_never(e)


def expr_text(e: Expr, names: SymbolNames) -> str:
    """Text of a scalar expression. Example: ``c[i0, i1] + a[i0, i2] * b[i2, i1]``."""
    return fold_expr(e, lambda x, kids: _node_text(x, kids, names))[0]


def _stmt_lines(s: Stmt, names: SymbolNames, pad: str) -> list[str]:
    """The lines of `s` itself (not of the statements nested in it)."""
    match s:
        case Noop():
            return [f"{pad}noop"]
        case Comment(text=text):
            return [f"{pad}# {line}" for line in text.splitlines() or [""]]
        case Seq(stmts=stmts):
            return [] if stmts else [f"{pad}noop"]
        case ForLoop(symbol=sym, extent=extent, threads=th):
            par = f" (parallel, {th} threads)" if th > 1 else ""
            return [f"{pad}for {names.bind(sym)} < {extent}{par}:"]
        case SetCell(buffer=buf, index=index, value=value):
            return [f"{pad}{format_cell(buf.name, index, names)} := {expr_text(value, names)}"]
        case DeclLocal(name=name, init=init):
            return [f"{pad}local {name} = {expr_text(init, names)}"]
        case SetLocal(name=name, value=value):
            return [f"{pad}{name} := {expr_text(value, names)}"]
        case Fill(buffer=buf, value=value):
            return [f"{pad}fill {buf.name} = {format_number(value)}"]
        case CheckIndex(index=index, bound=bound, code=code):
            return [f"{pad}check 0 <= {format_index(index, names)} < {bound} else return {code}"]
        case SetFromVec(buffer=buf, vector=vec, op=op, value=value, length=n):
            cells = f"{buf.name}[{n} * ({format_index(vec, names)}) + 0..{n}]"
            return [f"{pad}{cells} := {op.value}({expr_text(value, names)})"]
        case _:
            assert_never(s)


def _depth(s: Stmt, depth: int) -> int:
    return depth + 1 if isinstance(s, ForLoop) else depth


def print_program(prog: LoopProgram) -> str:
    """The whole routine as text, ending in a newline.

    >>> from ocannl_ast.lowering.loop_ir import Buffer
    >>> print(print_program(LoopProgram("z", (Buffer(0, "x", (2,)),), (),
    ...                                 Fill(Buffer(0, "x", (2,)), 0.0))), end="")
    routine z(x[2]) static()
      fill x = 0
    """
    names = SymbolNames(prog.static_args)
    bufs = ", ".join(f"{b.name}[{','.join(map(str, b.dims))}]"
                     + (f":{b.precision.value}" if b.precision is not None else "")
                     for b in prog.buffers)
    statics = ", ".join(names.use(s) for s in prog.static_args)
    header = f"routine {prog.name}({bufs}) static({statics})"
    if prog.precision is not Precision.FLOAT32:
        header += f" precision={prog.precision.value}"
    lines = [header]
    for s, depth in walk_stmts(prog.body, 1, _depth):
        lines += _stmt_lines(s, names, _INDENT * depth)
    return "\n".join(lines) + "\n"
