"""Verifier of the assignments IR: run between pipeline passes with OCANNL_AST_CHECK=1.

Stage: checks the `Asgn` the assignments pass builds and each `Asgn` -> `Asgn` pass returns,
before lowering. Input: an `Asgn`. Output: None, or `AsgnIRError` listing every problem.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import assert_never

from ..errors import OcannlError, ShapeError
from ..vocabulary import ACCUM_OPS
from . import assignments as A
from .coupled import check_cover
from .loop_ir import BinOp, Buffer, Symbol, TernOp, UnOp

#: the accumulators an assignment may use, read from the one vocabulary (`=:` is ARG2: the
#: new value replaces the old)
ACCUMULATORS = frozenset(acc for acc, _ in ACCUM_OPS.values())
_U32 = 1 << 32
_C_INT_MAX = (1 << 31) - 1


class AsgnIRError(OcannlError, ValueError):
    """Malformed assignments; the message lists each problem on its own line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        lines = "\n".join(f"  - {p}" for p in problems)
        super().__init__(f"invalid assignments IR:\n{lines}")


def arity(op: UnOp | BinOp | TernOp) -> int:
    return 1 if isinstance(op, UnOp) else 2 if isinstance(op, BinOp) else 3


@dataclass(slots=True)
class _Checker:
    problems: list[str] = field(default_factory=list)
    buffers: dict[int, Buffer] = field(default_factory=dict)  #: id -> first declaration
    _loops: list[tuple[Symbol, int]] = field(default_factory=list)  #: the current loops

    def report(self, where: str, message: str) -> None:
        self.problems.append(f"{where}: {message}")

    def buffer(self, buf: Buffer, where: str) -> None:
        """Every reference to a buffer id agrees on its name and dims (names may repeat
        across ids: lowering makes them unique). A batch slice's view (`loop_ir.View`) is
        checked apart from the slice's own array (a kept copy) and with its parent."""
        if buf.view is not None:
            self.buffer(buf.view.parent, where)
            if buf.view.parent.view is not None or len(buf.view.lead) + len(buf.dims) != len(
                    buf.view.parent.dims):
                self.report(where, f"view {buf.name!r} of {buf.view.parent.name!r}: its "
                                   "parent is a view, or the axes do not add up")
        first = self.buffers.setdefault(buf.id if buf.view is None else ~buf.id, buf)
        if first != buf:
            self.report(where, f"buffer id {buf.id} is {first.name!r} {first.dims} elsewhere, "
                               f"here {buf.name!r} {buf.dims}")
        if any(d < 0 for d in buf.dims):
            self.report(where, f"buffer {buf.name!r} has negative dims {buf.dims}")

    def asgn(self, a: A.Asgn, top: bool = True) -> None:
        match a:
            case A.Accum():
                self.accum(a)
            case A.Block(lhs=lhs, rhs=rhs, projections=p, label=lbl):
                where = f"block into {lhs.name!r}" + (f" ({lbl})" if lbl else "")
                self.sides(a.accum, lhs, rhs, p, where)
                self.cover(p, where)
            case A.RevSides(src=src, targets=targets, projections=p, label=lbl):
                where = f"rev_sides from {src.name!r}" + (f" ({lbl})" if lbl else "")
                self.sides(a.accum, src, targets, p, where)
                self.cover(p, where)
            case A.Fetch(buffer=buf, op=op, margins=m):
                self.buffer(buf, f"fetch into {buf.name!r}")
                self.fetch_op(op, f"fetch into {buf.name!r}")
                if isinstance(op, A.ConstantValues) and len(op.values) != _interior(buf, m):
                    self.report(f"fetch into {buf.name!r}", f"{len(op.values)} constant "
                                f"values for {_interior(buf, m)} cells")
            case A.CheckStatic(bound=bound, code=code):
                if bound < 0:
                    self.report("static check", f"negative bound {bound}")
                if code == 0 or abs(code) > _C_INT_MAX:
                    self.report("static check", f"error code {code} is not a nonzero C int")
            case A.Noop():
                if not top:
                    self.report("sequence", "a Noop inside a Seq (seq() drops them)")
            case A.Seq(items=items):
                self.seq(items, top)
            case A.VecSet(lhs=lhs, rhs=rhs, length=n):
                self.buffer(lhs, f"vector write into {lhs.name!r}")
                self.buffer(rhs, f"vector read of {rhs.name!r}")
                if n < 1 or not rhs.uint4x32 or lhs.uint4x32:
                    self.report(f"vector write into {lhs.name!r}", "needs uint4x32 -> numbers")
            case _:
                assert_never(a)

    def seq(self, items: tuple[A.Asgn, ...], top: bool) -> None:
        if not top:
            self.report("sequence", "a Seq nested in a Seq (seq() flattens them)")
        if len(items) < 2:
            self.report("sequence", f"a Seq of {len(items)} item(s) (seq() unwraps it)")
        for it in items:
            self.asgn(it, top=False)

    def fetch_op(self, op: A.FetchOp, where: str) -> None:
        match op:
            case A.ConstantFill() | A.RangeOverOffsets() | A.ConstantValues():
                pass
            case A.RandomUniform(key=key, low=low, high=high):
                if len(key) != 4 or any(not 0 <= k < _U32 for k in key):
                    self.report(where, f"random key {key} is not four 32-bit words")
                if not low <= high:
                    self.report(where, f"random range [{low}, {high}) is empty")
            case _:
                assert_never(op)

    def accum(self, a: A.Accum) -> None:
        where = f"assignment to {a.lhs.name!r}" + (f" ({a.label})" if a.label else "")
        self.buffer(a.lhs, where)
        for r in a.rhs:
            self.buffer(r, where)
        if a.accum not in ACCUMULATORS:
            self.report(where, f"{a.accum.value} is not an accumulation operator")
        used = self.expr(a.expr, len(a.rhs), where)
        for k in sorted(set(range(len(a.rhs))) - used):
            self.report(where, f"operand {k} ({a.rhs[k].name!r}) is never read by the expression")
        self.projections(a, where)

    def sides(self, acc: BinOp, one: Buffer, many: tuple[Buffer, ...], p: A.Projections,
              where: str) -> None:
        """A Block or Rev_sides: one buffer at projections.lhs, many at projections.rhs,
        and concatenated axes to select among the many."""
        self.buffer(one, where)
        for b in many:
            self.buffer(b, where)
        if acc not in ACCUMULATORS:
            self.report(where, f"{acc.value} is not an accumulation operator")
        if not many:
            self.report(where, "no sources")
        if not p.factors:
            self.report(where, "no concatenated axis (no coupled factor)")
        self.index_maps(p, one, many, where)

    def cover(self, p: A.Projections, where: str) -> None:
        try:
            check_cover(p, where)
        except ShapeError as e:
            self.report(where, str(e))

    def expr(self, e: A.RhsExpr, n_rhs: int, where: str) -> set[int]:
        """Check the expression; return the operand positions it reads."""
        match e:
            case A.Arg(k=k):
                if not 0 <= k < n_rhs:
                    self.report(where, f"operand {k} read, but the assignment has {n_rhs}")
                return {k}
            case A.Lit() | A.StaticValue():
                return set()
            case A.Prim(op=op, args=args):
                if len(args) != arity(op):
                    self.report(where, f"primitive {op.value} takes {arity(op)} argument(s), "
                                       f"got {len(args)}")
                return set().union(*(self.expr(x, n_rhs, where) for x in args))
            case _:
                assert_never(e)

    def projections(self, a: A.Accum, where: str) -> None:
        self.index_maps(a.projections, a.lhs, a.rhs, where)

    def index_maps(self, p: A.Projections, lhs: Buffer, rhs: tuple[Buffer, ...],
                   where: str) -> None:
        loops = list(p.product) + [x for f in p.factors for x in f]
        iterators = [s for s, _ in loops]
        if len(set(iterators)) != len(iterators):
            self.report(where, "an iterator appears twice in the product space")
        for s, extent in loops:
            if extent < 0:
                self.report(where, f"iterator {s.name}#{s.id} has negative extent {extent}")
        if len(p.rhs) != len(rhs) or len(p.rhs_dims) != len(rhs):
            self.report(where, f"{len(p.rhs)} right-hand index maps for {len(rhs)} operands")
        coupled = {s for f in p.factors for s, _ in f}
        self._loops = loops
        self.index_map(lhs, p.lhs, p.lhs_dims, where, coupled)
        for buf, ix, dims in zip(rhs, p.rhs, p.rhs_dims, strict=False):
            self.index_map(buf, ix, dims, where, coupled)

    def index_map(self, buf: Buffer, index: tuple[A.ProjIndex, ...], dims: tuple[int, ...],
                  where: str, coupled: set[Symbol]) -> None:
        if len(index) != len(buf.dims):
            self.report(where, f"{len(index)} indices for rank-{len(buf.dims)} {buf.name!r}")
        if dims != buf.dims:
            self.report(where, f"projections give {buf.name!r} dims {dims}, the buffer has "
                               f"{buf.dims}")
        for ix, d in zip(index, dims, strict=False):
            if isinstance(ix, A.ConcatIndex):
                self.concat_index(ix, d, buf, where, coupled)
                continue
            for coeff, sym in ix.terms:
                if coeff == 0:
                    self.report(where, f"zero coefficient on {_sym(sym)} in {buf.name!r}'s map")


    def concat_index(self, ix: A.ConcatIndex, size: int, buf: Buffer, where: str,
                     coupled: set[Symbol]) -> None:
        """Offsets are the injections: 0, then the running sum of the component extents,
        ending at the axis size; every component iterator is a coupled one."""
        extents = {s: n for s, n in self._loops}
        off = 0
        for s, o in ix.parts:
            if s not in coupled:
                self.report(where, f"{_sym(s)} in {buf.name!r}'s concatenated axis is not in "
                                   "a coupled factor")
                return
            if o != off:
                self.report(where, f"{_sym(s)} in {buf.name!r} has offset {o}, expected {off}")
            off += extents.get(s, 0)
        if off != size:
            self.report(where, f"{buf.name!r}'s concatenated axis has components of total "
                               f"size {off}, the axis {size}")


def _sym(s: Symbol) -> str:
    return f"{s.name}#{s.id}"


def verify_asgn(code: A.Asgn) -> None:
    """Raise `AsgnIRError` listing every problem of `code`; return None if well formed.

    >>> from ocannl_ast.lowering.loop_ir import Buffer
    >>> verify_asgn(A.Fetch(Buffer(0, "x", (2,)), A.ConstantFill(0.0)))
    """
    checker = _Checker()
    checker.asgn(code)
    if checker.problems:
        raise AsgnIRError(checker.problems)


def _interior(buf: Buffer, margins: tuple[tuple[int, int], ...]) -> int:
    """The number of interior (non-margin) cells of a buffer."""
    pads = margins or tuple((0, 0) for _ in buf.dims)
    return math.prod(d - lo - hi for d, (lo, hi) in zip(buf.dims, pads, strict=True))
