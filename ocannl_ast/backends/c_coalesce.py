"""Loop coalescing for the C backend: a perfect nest ``for i < A: for j < B: body`` whose
counters occur in `body` only in cell offsets, each offset stepping ``B*c`` along i and
``c`` along j (i steps over whole runs of j: row-major neighbours, or both 0), runs as the
one loop ``for k < A*B`` with the offsets ``c*k`` (k = B*i + j). Every iteration touches
the same cells with the same operations in the same order: bit-identical results. gcc
spends a good part of its time per loop (a 2-block transformer step's C: 196 loops down to
134, a quarter less gcc time), and the step runs no slower.

Stage: rendering (hooked into `c_renderer.CRenderer.for_loop`: the outer loop `offer`s its
body loop before rendering it; that loop merges (`render`) only where it too is written as
a plain serial loop, not a contraction kernel, reordered or lane-blocked nest; `nest`
writes a reordered reduction's loops, `c_reorder`). Input: `ForLoop`s of a verified
`LoopProgram`. Output: C text. A dialect without `reorder_loops` (CUDA: one thread per
cell) keeps its loops; `ENABLED` off keeps every loop.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol, assert_never

from ocannl_ast.backends.c_syntax import CSyntax
from ocannl_ast.lowering.loop_ir import (
    Binary,
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
    Noop,
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
)

__all__ = ["has_loop", "mergeable", "nest", "offer", "render"]


class Nester(Protocol):
    """What `nest` needs of `c_renderer.CRenderer`."""

    syntax: CSyntax
    symbols: dict[Symbol, str]
    n_iters: int
    absorbed: set[Symbol]

    def stmt(self, s: Stmt, depth: int, out: list[str]) -> None: ...


class Renderer(Nester, Protocol):
    """What the coalescing hook needs of `c_renderer.CRenderer`."""

    merging: tuple[ForLoop, Symbol, int, int] | None

    def pragmas(self, extent: int, body: Stmt, depth: int) -> list[str]: ...

#: Whether loops are coalesced at all (tests compare the bits with it off).
ENABLED = True

#: row-major strides by extents
_STRIDES: dict[tuple[int, ...], tuple[int, ...]] = {}


def mergeable(outer: ForLoop) -> ForLoop | None:
    """The loop directly inside `outer` (its whole body) when the two may run as one loop:
    both serial (`ForLoop.threads` 1), and in every cell index of the inner body the
    coefficient of the outer counter is the inner extent times that of the inner counter;
    neither counter occurs anywhere else (a `SymbolValue`, a threefry counter, a
    `CheckIndex`, a `SetFromVec` vector). Else None.
    Example: ``for i < 4: for j < 8: c[8*i + j] = a[8*i + j]`` -> the j loop."""
    inner = outer.body
    if inner.__class__ is Seq and len(inner.stmts) == 1:  # type: ignore[union-attr]
        inner = inner.stmts[0]  # type: ignore[union-attr]
    if not isinstance(inner, ForLoop) or outer.threads != 1 or inner.threads != 1:
        return None
    walk = _Walk(outer.symbol, inner.symbol, inner.extent)
    return inner if walk.stmt(inner.body) else None


def offer(r: Renderer, loop: ForLoop, extent: int, header: int) -> None:
    """Offer the loop directly inside `loop` (running `extent` times, its header at
    ``out[header]``) to coalesce with it, where `mergeable`: `render` takes the offer when
    that loop is written as a plain serial loop."""
    if ENABLED and isinstance(loop.body, ForLoop | Seq):
        inner = mergeable(loop)
        if inner is not None:
            r.merging = (inner, loop.symbol, extent, header)


def render(r: Renderer, loop: ForLoop, merge: tuple[Symbol, int, int], depth: int,
           out: list[str]) -> None:
    """`loop` (at `depth`) and the loop around it (`merge`: its counter, extent and the
    position of its header in `out`) as one loop over the product of their extents, at the
    outer depth, counting in the outer counter's name: the outer counter absorbed
    (`CRenderer.affine` writes no term of it), the body one level less indented. The outer
    loop closes it."""
    outer_sym, outer_extent, header = merge
    # the counter is named as the outer one here only: the IR may reuse both counters in
    # other nests, where they must keep names of their own
    before = r.symbols.get(loop.symbol)
    name = r.symbols[loop.symbol] = r.symbols[outer_sym]
    total = outer_extent * loop.extent
    out[header] = "  " * (depth - 1) + r.syntax.for_header(name, total)
    if not has_loop(loop.body):
        lines = r.pragmas(total, loop.body, depth - 1)
        out[header:header] = lines
    else:
        offer(r, loop, total, header)
    r.absorbed.add(outer_sym)
    r.stmt(loop.body, depth, out)
    r.absorbed.discard(outer_sym)
    if before is None:
        del r.symbols[loop.symbol]
    else:
        r.symbols[loop.symbol] = before


def nest(r: Nester, loops: Sequence[tuple[Symbol, int]], body: Stmt, depth: int,
         out: list[str]) -> None:
    """``for loops: body`` (outermost first) written directly (no hooks: a reordered
    nest's loops, `c_reorder`), each run of neighbours that `mergeable` would join as one
    loop."""
    runs: list[list[tuple[Symbol, int]]] = []
    for k, (sym, extent) in enumerate(loops):
        if runs and ENABLED and _Walk(loops[k - 1][0], sym, extent).stmt(body):
            runs[-1].append((sym, extent))
        else:
            runs.append([(sym, extent)])
    saved: list[tuple[Symbol, str | None]] = []
    for level, run in enumerate(runs):
        first = run[0][0]
        if first not in r.symbols:
            r.symbols[first] = f"i{r.n_iters}"
            r.n_iters += 1
        name = r.symbols[first]
        for sym, _ in run[1:]:  # named as the first here only (see `render`)
            saved.append((sym, r.symbols.get(sym)))
            r.symbols[sym] = name
        r.absorbed.update(sym for sym, _ in run[:-1])
        total = math.prod(e for _, e in run)
        out.append("  " * (depth + level) + r.syntax.for_header(name, total))
    r.stmt(body, depth + len(runs), out)
    for level in range(len(runs) - 1, -1, -1):
        out.append("  " * (depth + level) + "}")
    for run in runs:
        r.absorbed.difference_update(sym for sym, _ in run[:-1])
    for sym, before in reversed(saved):
        if before is None:
            del r.symbols[sym]
        else:
            r.symbols[sym] = before


def has_loop(s: Stmt) -> bool:
    """Whether `s` contains a loop (a loop around `s` is not innermost)."""
    stack = [s]  # (stops at the first loop: the body of an outer loop starts with one)
    while stack:
        x = stack.pop()
        if isinstance(x, ForLoop):
            return True
        if isinstance(x, Seq):
            stack += x.stmts
    return False


class _Walk:
    """The check of `mergeable` over one inner body: i the outer counter, j the inner, b
    the inner extent."""

    __slots__ = ("b", "i", "j")

    def __init__(self, i: Symbol, j: Symbol, b: int) -> None:
        self.i, self.j, self.b = i, j, b

    def free(self, e: IndexExpr) -> bool:
        """Whether neither counter occurs in `e` (an index other than a cell's)."""
        return all(not self.is_i(s) and not self.is_j(s) for _, s in e.terms)

    # (equal symbols have equal ids: the ints are compared first, the records only when
    # those match -- a record's generated __eq__ is a Python call, and this a hot path)
    def is_i(self, s: Symbol) -> bool:
        return s.id == self.i.id and s == self.i

    def is_j(self, s: Symbol) -> bool:
        return s.id == self.j.id and s == self.j

    def cell(self, dims: tuple[int, ...], index: tuple[IndexExpr, ...]) -> bool:
        """Whether the flat offset of the cell steps b times more along i than along j."""
        strides = _STRIDES.get(dims)
        if strides is None:
            strides = _STRIDES[dims] = tuple(math.prod(dims[k + 1:]) for k in range(len(dims)))
        ci = cj = 0
        i, j = self.i, self.j
        i_id, j_id = i.id, j.id
        for e, stride in zip(index, strides):
            for coeff, s in e.terms:
                sid = s.id
                if sid == i_id and s == i:
                    ci += coeff * stride
                elif sid == j_id and s == j:
                    cj += coeff * stride
        return ci == self.b * cj

    def expr(self, e: Expr) -> bool:
        match e:
            case Get(buffer=buf, index=index):
                return self.cell(buf.dims, index)
            case Binary(lhs=a, rhs=b):
                return self.expr(a) and self.expr(b)
            case Const() | GetLocal():
                return True
            case Unary(arg=a):
                return self.expr(a)
            case Ternary(a=a, b=b, c=c):
                return self.expr(a) and self.expr(b) and self.expr(c)
            case SymbolValue(symbol=s):
                return not self.is_i(s) and not self.is_j(s)
            case ThreefryUniform(counter=counter):
                return self.free(counter)
            case _:
                assert_never(e)

    def stmt(self, s: Stmt) -> bool:
        match s:
            case SetCell(buffer=buf, index=index, value=value):
                return self.cell(buf.dims, index) and self.expr(value)
            case Seq(stmts=stmts):
                return all(self.stmt(x) for x in stmts)
            case ForLoop(body=body):
                return self.stmt(body)
            case DeclLocal(init=value) | SetLocal(value=value):
                return self.expr(value)
            case Comment() | Noop() | Fill():
                return True
            case CheckIndex(index=index):
                return self.free(index)
            case SetFromVec(vector=vector, value=value):
                return self.free(vector) and self.expr(value)
            case _:
                assert_never(s)
