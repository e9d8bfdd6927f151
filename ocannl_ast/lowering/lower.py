"""Lowering: assignments IR -> loop IR. The reduction characterization decides the
pre-clear (LHS map non-surjective or non-injective) and the plain write (injective).

Input: an `Asgn` tree. Output: a `LoopProgram` over every buffer it touches.
"""

from __future__ import annotations

import itertools
import math
from typing import assert_never

from .. import vocabulary
from ..errors import ShapeError
from . import coupled
from .assignments import (
    Accum,
    Arg,
    Asgn,
    Block,
    CheckStatic,
    ConstantFill,
    ConstantValues,
    Fetch,
    FetchOp,
    Lit,
    Noop,
    Prim,
    RandomUniform,
    RangeOverOffsets,
    RevSides,
    RhsExpr,
    Seq,
    StaticValue,
    VecSet,
)
from .ids import fresh_id
from .loop_ir import (
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
    Comment,
    Const,
    DeclLocal,
    Expr,
    Fill,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Precision,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    TernOp,
    ThreefryUniform,
    Unary,
    UnOp,
    View,
)
from .loop_ir import Noop as LNoop
from .loop_ir import Seq as LSeq
from .nests import nest
from .views import Checks, guarded, resolve_part

NEUTRAL: dict[BinOp, float] = vocabulary.NEUTRAL
#: accumulators for which accum(neutral, x) == x, so an injective write can be plain
PLAIN_WRITE_OK = frozenset({BinOp.ADD, BinOp.MUL, BinOp.MAX, BinOp.MIN, BinOp.ARG2})

def lower(code: Asgn, name: str, *, static_args: tuple[Symbol, ...] = (),
          precision: Precision = Precision.FLOAT32) -> LoopProgram:
    """Lower assignments into one routine. Example: ``lower(seq(...), "step")``."""
    buffers = _Buffers()
    body = _lower(code, buffers)
    if buffers.views:  # (the parts using a view are resolved as they are lowered)
        body = guarded(body, buffers.checks)
    return LoopProgram(name, tuple(buffers.values()), static_args, body, precision)


class _Buffers(dict[int, Buffer]):
    """The routine's buffers by id, in order of first use, and the names they took."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()
        #: per name stem, the suffix from which a free name is sought next (names are only
        #: added, so every smaller suffix stays taken: the search is not quadratic)
        self.next_suffix: dict[str, int] = {}
        self.views = False  #: whether a viewing buffer was used
        self.checks: Checks = {}  #: the views' index checks (`views.resolve_part`)
        #: numbers the local reduction accumulators (acc1, acc2, ...) in program order: the
        #: units are lowered left to right, and blocks declaring a local do not nest
        self.locals = itertools.count(1)


def _use(buf: Buffer, buffers: _Buffers) -> Buffer:
    """Register a buffer; names are made unique in order of first use (deterministic). A
    view registers its parent (`lowering.views` resolves the view's accesses)."""
    if buf.view is not None:
        buffers.views = True
        parent = _use(buf.view.parent, buffers)
        v = buf.view  # direct constructors (a dataclass replace is slow on this hot path)
        return Buffer(buf.id, buf.name, buf.dims, buf.uint4x32,
                      View(parent, v.lead, v.shift, v.checks), buf.precision)
    known = buffers.get(buf.id)
    if known is None:
        name, k = buf.name, buffers.next_suffix.get(buf.name, 1)
        if name in buffers.names:
            name = f"{buf.name}_{k}"
            while name in buffers.names:
                k += 1
                name = f"{buf.name}_{k}"
            buffers.next_suffix[buf.name] = k + 1
        buffers.names.add(name)
        known = buffers[buf.id] = Buffer(buf.id, name, buf.dims, buf.uint4x32,
                                         precision=buf.precision)
    if known.dims != buf.dims:
        raise ValueError(f"buffer {buf.name} used with dims {buf.dims} and {known.dims}")
    return known


def _lower(code: Asgn, buffers: _Buffers) -> Stmt:
    """`code` lowered, each part using a viewing buffer with its views resolved (no walk
    of the parts without one)."""
    match code:
        case Seq(items=items):
            return LSeq(tuple(_lower(x, buffers) for x in items))
        case _:
            views, buffers.views = buffers.views, False
            out = _lower_part(code, buffers)
            if buffers.views:
                out = resolve_part(out, buffers.checks)
            buffers.views |= views
            return out


def _lower_part(code: Asgn, buffers: _Buffers) -> Stmt:
    match code:
        case Noop():
            return LNoop()
        case Seq():
            return _lower(code, buffers)
        case Accum() if code.projections.factors:
            return coupled.lower_accum(code, _use(code.lhs, buffers),
                                       [_use(x, buffers) for x in code.rhs],
                                       lambda args: rhs_expr(code.expr, args))
        case Accum():
            return _lower_accum(code, buffers)
        case Block():
            return coupled.lower_block(code, _use(code.lhs, buffers),
                                       [_use(x, buffers) for x in code.rhs])
        case RevSides():
            return coupled.lower_rev_sides(code, _use(code.src, buffers),
                                           [_use(x, buffers) for x in code.targets])
        case Fetch(buffer=buf, op=op, margins=m):
            return _lower_fetch(_use(buf, buffers), op, m)
        case CheckStatic(symbol=sym, bound=bound, code=err):
            return CheckIndex(IndexExpr(((1, sym),), 0), bound, err)
        case VecSet():
            return _lower_vec(code, buffers)
        case _:
            assert_never(code)


def _lower_vec(v: VecSet, buffers: _Buffers) -> Stmt:
    """Set_from_vec: one loop over the input cells, each writing `length` output cells."""
    lhs, rhs = _use(v.lhs, buffers), _use(v.rhs, buffers)
    n_out, n_in = math.prod(lhs.dims), math.prod(rhs.dims)
    if lhs.uint4x32 or -(-n_out // v.length) != n_in:
        raise ShapeError(f"{v.label or v.op.value}: {n_in} input cells cannot fill {n_out} "
                         f"output cells {v.length} at a time")
    loops, index, offset = _cell_loops(rhs)
    return nest(loops, SetFromVec(lhs, offset, v.op, Get(rhs, index), v.length))


def rhs_expr(e: RhsExpr, args: list[Expr]) -> Expr:
    """An Accum's expression tree with operand k read as ``args[k]``."""
    match e:
        case Arg(k=k):
            return args[k]
        case Lit(value=v):
            return Const(v)
        case StaticValue(symbol=s):
            return SymbolValue(s)
        case Prim(op=op, args=sub):
            return apply_op(op, [rhs_expr(x, args) for x in sub])
        case _:
            assert_never(e)


def apply_op(op: UnOp | BinOp | TernOp, args: list[Expr]) -> Expr:
    """The primitive applied to its argument expressions."""
    if isinstance(op, UnOp):
        return args[0] if op == UnOp.IDENTITY else Unary(op, args[0])
    if isinstance(op, BinOp):
        return Binary(op, args[0], args[1])
    return Ternary(op, args[0], args[1], args[2])


def _lower_accum(a: Accum, buffers: _Buffers) -> Stmt:
    value = NEUTRAL[a.accum] if a.margin_value is None else a.margin_value
    resets = [_reset_margins(_use(b, buffers), m, value)
              for b, m in zip(a.rhs, a.rhs_margins, strict=False) if m]
    body = _lower_accum_body(a, buffers)
    return LSeq((*_unique(resets), body)) if resets else body


def _unique(stmts: list[Stmt]) -> list[Stmt]:
    out: list[Stmt] = []
    for s in stmts:
        if s not in out:
            out.append(s)
    return out


def _reset_margins(buf: Buffer, margins: tuple[tuple[int, int], ...], value: float) -> Stmt:
    """Padding (seed 001): the margins read as the consuming accumulation's neutral element,
    so each padded axis's left and right slabs (all other axes in full) are set to it."""
    pads = " ".join(f"{lo}+{hi}" for lo, hi in margins)
    stmts: list[Stmt] = [Comment(f"padding: reset the margins ({pads}) of {buf.name} "
                                 f"{list(buf.dims)} to {value:g}")]
    for axis, (left, right) in enumerate(margins):
        for start, width in ((0, left), (buf.dims[axis] - right, right)):
            if width == 0:
                continue
            loops: list[tuple[Symbol, int]] = []
            index: list[IndexExpr] = []
            for j, d in enumerate(buf.dims):
                n = width if j == axis else d
                if n == 1:
                    index.append(IndexExpr((), start if j == axis else 0))
                    continue
                s = Symbol(fresh_id(), "m")
                loops.append((s, n))
                index.append(IndexExpr(((1, s),), start if j == axis else 0))
            stmts.append(nest(loops, SetCell(buf, tuple(index), Const(value))))
    return LSeq(tuple(stmts))


def _lower_accum_body(a: Accum, buffers: _Buffers) -> Stmt:
    p = a.projections
    lhs = _use(a.lhs, buffers)
    lhs_ix = coupled.flat(p.lhs)
    args: list[Expr] = [Get(_use(x, buffers), coupled.flat(p.rhs[k]))
                        for k, x in enumerate(a.rhs)]
    val = rhs_expr(a.expr, args)
    # the reduction iterators (`p.reduction_iterators()`) are those the LHS map omits
    used = {s for ix in p.lhs if isinstance(ix, IndexExpr) for _, s in ix.terms}
    outer = [(s, n) for s, n in p.product if s in used]
    inner = [(s, n) for s, n in p.product if s not in used]
    injective = not inner and p.lhs_injective()  # (no reduced iterator: `inner` empty)
    surjective = p.lhs_surjective()
    stmts: list[Stmt] = []
    if a.accum == BinOp.ARG2:
        body: Stmt = nest(outer + inner, SetCell(lhs, lhs_ix, val))
        if a.initialize_neutral and not surjective:
            # OCANNL `=:` erases: cells the projection never writes read the neutral 0
            return LSeq((Fill(lhs, NEUTRAL[a.accum]), body))
        return body
    local = bool(inner) and _outer_injective(lhs_ix, {s for s, _ in outer})
    plain = a.initialize_neutral and injective and a.accum in PLAIN_WRITE_OK
    # A plain write or a local accumulator (starting from the neutral element) writes every
    # written cell once: only unwritten cells (non-surjective map) need the neutral element;
    # a read-modify-write needs every cell at the neutral element first.
    if a.initialize_neutral and not (surjective and (plain or local)):
        stmts.append(Fill(lhs, NEUTRAL[a.accum]))
    if plain:
        stmts.append(nest(outer, SetCell(lhs, lhs_ix, val)))
    elif local:
        acc = f"acc{next(buffers.locals)}"
        stmts.append(nest(outer, _local_reduction(a, lhs, lhs_ix, val, inner, acc)))
    else:
        stmts.append(nest(outer + inner, SetCell(lhs, lhs_ix,
                                                   Binary(a.accum, Get(lhs, lhs_ix), val))))
    return stmts[0] if len(stmts) == 1 else LSeq(tuple(stmts))


def _outer_injective(index: tuple[IndexExpr, ...], outer: set[Symbol]) -> bool:
    seen: set[Symbol] = set()
    for ix in index:
        if len(ix.terms) > 1:
            return False
        for _, s in ix.terms:
            if s in seen or s not in outer:
                return False
            seen.add(s)
    return seen == outer


def _local_reduction(a: Accum, lhs: Buffer, index: tuple[IndexExpr, ...], val: Expr,
                     inner: list[tuple[Symbol, int]], acc: str) -> Stmt:
    """Accumulate the reduction axes in the scalar local `acc`, then write the cell once."""
    if a.initialize_neutral:
        init: Expr = Const(NEUTRAL[a.accum])
    else:
        init = Get(lhs, index)
    step = SetLocal(acc, Binary(a.accum, GetLocal(acc), val))
    return LSeq((DeclLocal(acc, init), nest(inner, step), SetCell(lhs, index, GetLocal(acc))))


def _cell_loops(buf: Buffer, margins: tuple[tuple[int, int], ...] = ()
                ) -> tuple[list[tuple[Symbol, int]], tuple[IndexExpr, ...], IndexExpr]:
    """Loops over every interior cell of a buffer (margins excluded), its index, and its
    logical linear offset."""
    loops: list[tuple[Symbol, int]] = []
    index: list[IndexExpr] = []
    stride, terms = 1, []
    pads = margins or tuple((0, 0) for _ in buf.dims)
    for d_buf, (lo, hi) in zip(reversed(buf.dims), reversed(pads), strict=True):
        d = d_buf - lo - hi
        if d != 1:  # a size-0 axis: a loop that runs zero times
            s = Symbol(fresh_id(), "c")
            loops.append((s, d))
            index.append(IndexExpr(((1, s),), lo))
            terms.append((stride, s))
        else:
            index.append(IndexExpr((), lo))
        stride *= d
    loops.reverse()
    index.reverse()
    return loops, tuple(index), IndexExpr(tuple(reversed(terms)), 0)


def _offset_value(offset: IndexExpr) -> Expr:
    out: Expr = Const(float(offset.offset))
    for c, s in offset.terms:
        out = Binary(BinOp.ADD, out, Binary(BinOp.MUL, Const(float(c)), SymbolValue(s)))
    return out


def _lower_fetch(buf: Buffer, op: FetchOp,
                 margins: tuple[tuple[int, int], ...] = ()) -> Stmt:
    match op:
        case ConstantFill(value=v):
            return Fill(buf, v)
        case RangeOverOffsets():
            loops, index, offset = _cell_loops(buf, margins)
            return nest(loops, SetCell(buf, index, _offset_value(offset)))
        case ConstantValues(values=vs):
            return _unrolled_values(buf, vs, margins)
        case RandomUniform(key=key, low=lo, high=hi):
            loops, index, offset = _cell_loops(buf, margins)
            u: Expr = ThreefryUniform(key, offset)
            val = u
            if (lo, hi) != (0.0, 1.0):
                val = Binary(BinOp.ADD, Binary(BinOp.MUL, u, Const(hi - lo)), Const(lo))
            return nest(loops, SetCell(buf, index, val))
        case _:
            assert_never(op)


def _unrolled_values(buf: Buffer, values: tuple[float, ...],
                     margins: tuple[tuple[int, int], ...]) -> Stmt:
    """One SetCell per interior cell, cell k (layout order) taking values[k]."""
    pads = margins or tuple((0, 0) for _ in buf.dims)
    interior = tuple(d - lo - hi for d, (lo, hi) in zip(buf.dims, pads, strict=True))
    stmts: list[Stmt] = []
    for k, v in enumerate(values):
        index: list[IndexExpr] = []
        rest = k
        for d, (lo, _hi) in zip(reversed(interior), reversed(pads), strict=True):
            index.append(IndexExpr((), rest % d + lo))
            rest //= d
        stmts.append(SetCell(buf, tuple(reversed(index)), Const(v)))
    return stmts[0] if len(stmts) == 1 else LSeq(tuple(stmts))
