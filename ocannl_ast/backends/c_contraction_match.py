"""Recognising contractions for the C backend's kernels (`c_contraction`): a matmul-class
loop nest of the loop IR as a `Contraction` -- its output and factors as flat affine
accesses, its outer and reduction loops.

Stage: rendering (`c_contraction.KernelUse` asks `match` of each loop it renders). Input: a
`ForLoop` of a verified `LoopProgram` and the symbols bound around it. Output: the
`Contraction` it computes, or None. Also `flat`, the row-major flat offset of a cell index
(the renderer's hot path).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Container
from dataclasses import dataclass

from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    Const,
    Expr,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    SetCell,
    Stmt,
    Symbol,
)
from ocannl_ast.lowering.nests import ReductionNest, match_reduction, peel
from ocannl_ast.lowering.walk import Loop

__all__ = ["Access", "Contraction", "flat", "match"]


@dataclass(frozen=True, slots=True)
class Access:
    """A buffer read or written at a flat (row-major) affine offset."""

    buffer: Buffer
    coeffs: tuple[tuple[Symbol, int], ...]  #: flat coefficient of each symbol, nonzero
    offset: int

    def coeff(self, sym: Symbol) -> int:
        for s, c in self.coeffs:  # a few pairs: a scan beats building a dict (hot)
            if s is sym or (s.id == sym.id and s == sym):  # (ints first: a record's == is slow)
                return c
        return 0


@dataclass(frozen=True, slots=True)
class Contraction:
    """``c (= or +=) sum over reduce of the product of factors``, over `outer` x `reduce`."""

    out: Access
    factors: tuple[Access, ...]  #: two, or three (e.g. a convolution's window mask)
    outer: tuple[Loop, ...]
    reduce: tuple[Loop, ...]
    accumulate: bool


#: row-major strides by extents (`flat`)
_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def flat(dims: tuple[int, ...], index: tuple[IndexExpr, ...]) -> tuple[dict[Symbol, int], int]:
    """`nests.flat_terms` (the same terms in the same order), the strides of `dims` kept
    (a hot path of rendering: every cell and kernel operand)."""
    strides = _STRIDES.get(dims)
    if strides is None:
        strides = _STRIDES[dims] = tuple(math.prod(dims[k + 1:]) for k in range(len(dims)))
    terms: dict[Symbol, int] = {}
    offset = 0
    for e, stride in zip(index, strides):
        for coeff, sym in e.terms:
            terms[sym] = terms.get(sym, 0) + coeff * stride
        offset += e.offset * stride
    return terms, offset


def _access(buf: Buffer, index: tuple[IndexExpr, ...], own: set[Symbol],
            bound: Container[Symbol]) -> Access | None:
    """The access, when every symbol of its index is `own` or `bound`."""
    if buf.uint4x32 or len(index) != len(buf.dims):
        return None
    coeffs, offset = flat(buf.dims, index)
    for sym in coeffs:
        if sym not in own and sym not in bound:
            return None
    return Access(buf, tuple([(s, c) for s, c in coeffs.items() if c != 0]), offset)


def _factors(e: Expr) -> list[Get] | None:
    """The reads of a product of reads (two or three of them), or None."""
    if e.__class__ is Get:
        return [e]  # type: ignore[list-item]
    if e.__class__ is not Binary or e.op is not BinOp.MUL:  # type: ignore[union-attr]
        return None
    left = _factors(e.lhs)  # type: ignore[union-attr]
    right = _factors(e.rhs)  # type: ignore[union-attr]
    if left is None or right is None or len(left) + len(right) > 3:
        return None
    return left + right


def _sum_with(e: Expr, is_first: Callable[[Expr], bool]) -> Expr | None:
    """`rest` of ``first + rest`` or ``rest + first``, where `is_first(term)` picks first."""
    if isinstance(e, Binary) and e.op is BinOp.ADD:
        if is_first(e.lhs):
            return e.rhs
        if is_first(e.rhs):
            return e.lhs
    return None


def _is_cell(e: Expr, buf: Buffer, index: tuple[IndexExpr, ...]) -> bool:
    """``e == Get(buf, index)``, without making the node."""
    return e.__class__ is Get and e.buffer == buf and e.index == index  # type: ignore[union-attr]


def _is_local(e: Expr, name: str) -> bool:
    """``e == GetLocal(name)``, without making the node."""
    return e.__class__ is GetLocal and e.name == name  # type: ignore[union-attr]


def _store(s: Stmt, acc: str) -> tuple[SetCell, bool] | None:
    """``c[i] = acc`` (False) or ``c[i] = c[i] + acc`` (True)."""
    if not isinstance(s, SetCell):
        return None
    if _is_local(s.value, acc):
        return s, False
    rest = _sum_with(s.value, lambda t: _is_cell(t, s.buffer, s.index))
    return (s, True) if rest is not None and _is_local(rest, acc) else None


def _match_local(loop: ForLoop) -> tuple[ReductionNest, SetCell, Expr, bool] | None:
    """`loop` as a sum into a local from +0: the nest, its store, the summed term and
    whether the store accumulates."""
    red = match_reduction(loop)
    if red is None:
        return None
    init, acc, store = red.init, red.acc, red.store
    term = _sum_with(red.step, lambda t: _is_local(t, acc))
    if term is None:
        return None
    if _is_cell(init, store.buffer, store.index) and _is_local(store.value, acc):
        return red, store, term, True  # acc = c[i]; acc += ...; c[i] = acc: c += sum
    if not (isinstance(init, Const) and init.value == 0.0 and math.copysign(1, init.value) > 0):
        return None
    found = _store(store, acc)
    return (red, found[0], term, found[1]) if found is not None else None


def match(loop: ForLoop, bound: Container[Symbol]) -> Contraction | None:
    """The contraction `loop` computes, or None; `bound`: the static arguments and enclosing
    iterators its indices may use as constants (a set, or the renderer's names by symbol).
    Example: the nest of ``ij;jk=>ik``."""
    outer, body = peel(loop)
    if isinstance(body, SetCell):
        term_or_none = _sum_with(body.value, lambda t: _is_cell(t, body.buffer, body.index))
        if term_or_none is None:
            return None
        red, cell, term, accumulate = [], body, term_or_none, True
    else:
        found = _match_local(loop)
        if found is None:
            return None
        nest, cell, term, accumulate = found
        red = list(nest.reduce)
    reads = _factors(term)
    loops = [*outer, *red]
    own = {s for s, _ in loops}  # (a sibling nest before may have bound the same symbols)
    if reads is None or len(reads) < 2 or len(own) != len(loops):
        return None
    out = _access(cell.buffer, cell.index, own, bound)
    factors = [_access(g.buffer, g.index, own, bound) for g in reads]
    if out is None or any(f is None or f.buffer == out.buffer for f in factors):
        return None
    if not red:  # the all-loops form: the loops c does not use are the reduction
        red = [lp for lp in outer if out.coeff(lp[0]) == 0]
        outer = [lp for lp in outer if out.coeff(lp[0]) != 0]
    return Contraction(out, tuple(f for f in factors if f is not None), tuple(outer),
                       tuple(red), accumulate)
