"""Deterministic printer for the assignments IR: iterators renumbered in order of first
appearance, buffers by name, one line per assignment (for golden files and debugging).

Input: an `Asgn`. Output: text such as ``c =:+ a * b | i0<2 i1<4 i2<3 | c[i0,i1] ...``.
"""

from __future__ import annotations

from typing import assert_never

from ..vocabulary import accum_spelling
from . import assignments as A
from .loop_ir import BinOp, Symbol, TernOp, UnOp

_INFIX = {BinOp.ADD: "+", BinOp.SUB: "-", BinOp.MUL: "*", BinOp.DIV: "/", BinOp.POW: "**"}


class _Names:
    def __init__(self) -> None:
        self.names: dict[Symbol, str] = {}

    def sym(self, s: Symbol) -> str:
        if s not in self.names:
            self.names[s] = f"i{len(self.names)}"
        return self.names[s]

    def index(self, ix: A.ProjIndex) -> str:
        if isinstance(ix, A.ConcatIndex):
            return "^".join(f"{self.sym(s)}+{off}" if off else self.sym(s)
                            for s, off in ix.parts)
        parts = [(self.sym(s) if c == 1 else f"{c}*{self.sym(s)}") for c, s in ix.terms]
        if ix.offset or not parts:
            parts.append(str(ix.offset))
        return "+".join(parts)


def _expr(e: A.RhsExpr, rhs: tuple[str, ...], n: _Names) -> str:
    match e:
        case A.Arg(k=k):
            return rhs[k]
        case A.Lit(value=v):
            return repr(v)
        case A.StaticValue(symbol=s):
            return f"${s.name}"
        case A.Prim(op=op, args=args):
            sub = [_expr(x, rhs, n) for x in args]
            if isinstance(op, BinOp) and op in _INFIX:
                return f"({sub[0]} {_INFIX[op]} {sub[1]})"
            if isinstance(op, UnOp | BinOp | TernOp):
                return f"{op.value}({', '.join(sub)})"
            assert_never(op)
        case _:
            assert_never(e)


def _loops(p: A.Projections, n: _Names) -> str:
    """Flat iterators, then each coupled factor as `(a<2 ; b<3)` (run one after another)."""
    flat = [f"{n.sym(s)}<{ext}" for s, ext in p.product]
    coupled = ["(" + " ; ".join(f"{n.sym(s)}<{ext}" for s, ext in f) + ")" for f in p.factors]
    return " ".join(flat + coupled)


def _block(lhs: str, op: str, sides: list[str], p: A.Projections, n: _Names, kind: str) -> str:
    loops = _loops(p, n)
    return f"{lhs} {op} {kind}({' | '.join(sides)})" + (f"   | {loops}" if loops else "")


def _map(b: str, m: tuple[A.ProjIndex, ...], n: _Names) -> str:
    return f"{b}[{','.join(n.index(ix) for ix in m)}]"


def _accum(a: A.Accum, n: _Names) -> str:
    p = a.projections
    loops = _loops(p, n)
    lhs = f"{a.lhs.name}[{','.join(n.index(ix) for ix in p.lhs)}]"
    rhs = tuple(f"{b.name}[{','.join(n.index(ix) for ix in m)}]"
                for b, m in zip(a.rhs, p.rhs, strict=True))
    op = accum_spelling(a.accum, a.initialize_neutral)
    body = _expr(a.expr, rhs, n)
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1]
    return f"{lhs} {op} {body}" + (f"   | {loops}" if loops else "")


def print_asgn(code: A.Asgn) -> str:
    """Text form of an assignments tree, one statement per line."""
    n = _Names()
    lines: list[str] = []

    def walk(c: A.Asgn) -> None:
        match c:
            case A.Noop():
                pass
            case A.Seq(items=items):
                for x in items:
                    walk(x)
            case A.Accum():
                lines.append(_accum(c, n))
            case A.Block(lhs=lhs, rhs=rhs, projections=p):
                op = accum_spelling(c.accum, c.initialize_neutral)
                srcs = [_map(b.name, m, n) for b, m in zip(rhs, p.rhs, strict=True)]
                lines.append(_block(_map(lhs.name, p.lhs, n), op, srcs, p, n, "block"))
            case A.RevSides(src=src, targets=targets, projections=p):
                op = accum_spelling(c.accum, False)
                tgts = [_map(b.name, m, n) for b, m in zip(targets, p.rhs, strict=True)]
                lines.append(_block("rev_sides(" + " | ".join(tgts) + ")", op,
                                    [_map(src.name, p.lhs, n)], p, n, "from"))
            case A.Fetch(buffer=b, op=op):
                lines.append(f"{b.name} := fetch {_fetch(op)}")
            case A.CheckStatic(symbol=s, bound=bound, code=code):
                lines.append(f"check 0 <= ${s.name} < {bound} else {code}")
            case A.VecSet(lhs=lhs, op=op, rhs=rhs, length=k):
                lines.append(f"{lhs.name} := {op.value}({rhs.name}) x{k}")
            case _:
                assert_never(c)

    walk(code)
    return "\n".join(lines) + "\n"


def _fetch(op: A.FetchOp) -> str:
    match op:
        case A.ConstantFill(value=v):
            return f"constant {v!r}"
        case A.RangeOverOffsets():
            return "range_over_offsets"
        case A.ConstantValues(values=vs):
            return "constant_values [" + ", ".join(repr(v) for v in vs) + "]"
        case A.RandomUniform(low=lo, high=hi):
            return f"uniform [{lo!r}, {hi!r})"
        case _:
            assert_never(op)
