"""Assignments IR (seed 000 "From what you write to the projections"): accumulating
operations carrying their projections, fetches, sequences.

Input: built by the tensor layer (op_asn / grad_asn code). Output: lowered to the loop
IR by `lowering.lower`. Nodes are frozen slotted dataclasses.
"""

from __future__ import annotations

from ..records import record
from .loop_ir import BinOp, Buffer, IndexExpr, Symbol, TernOp, UnOp, VecUnOp


@record
class ConcatIndex:
    """A concatenated axis (seed 004): at lowering it resolves to the one active
    component's iterator plus that component's injection offset (the sizes before it)."""

    parts: tuple[tuple[Symbol, int], ...]  #: (component iterator, offset), in axis order


ProjIndex = IndexExpr | ConcatIndex
#: a coupled factor (seed 004): iterators traversed one after another, never nested
Factor = tuple[tuple[Symbol, int], ...]


@record
class Projections:
    """Product space and index maps of one assignment (slot 0 = LHS, slots 1.. = RHS).
    `factors` are the coupled (concatenation) factors; their iterators are not in
    `product`, and only then do index maps hold `ConcatIndex` entries."""

    product: tuple[tuple[Symbol, int], ...]  #: loop iterators with their extents
    lhs: tuple[ProjIndex, ...]  #: index map of the written tensor, layout order
    rhs: tuple[tuple[ProjIndex, ...], ...]  #: index maps of the read tensors
    lhs_dims: tuple[int, ...]
    rhs_dims: tuple[tuple[int, ...], ...]
    debug: str = ""
    #: padded affine axes: (slot, flat axis, left, right) margins this operation needs
    margins: tuple[tuple[int, int, int, int], ...] = ()
    #: the coupled (concatenation) factors, see the class docstring
    factors: tuple[Factor, ...] = ()
    #: per RHS slot, the coupled iterator it is live under (a stack's k-th operand has no
    #: axis naming its component); () when no slot is gated
    gates: tuple[Symbol | None, ...] = ()

    def gate(self, i: int) -> Symbol | None:
        """The gate of slot `i` (0 = LHS, never gated)."""
        return self.gates[i - 1] if i > 0 and self.gates else None

    def regated(self, slots: tuple[int, ...]) -> tuple[Symbol | None, ...]:
        """The gates of a slot-permuted view (`slots`: the view's RHS slots)."""
        gs = tuple(self.gate(s) for s in slots)
        return gs if any(g is not None for g in gs) else ()

    def slot(self, i: int) -> tuple[tuple[ProjIndex, ...], tuple[int, ...]]:
        return (self.lhs, self.lhs_dims) if i == 0 else (self.rhs[i - 1], self.rhs_dims[i - 1])

    def view(self, lhs_slot: int, rhs_slots: tuple[int, ...]) -> Projections:
        """The slot-permuted view a gradient assignment reads (seed 000). Example:
        ``p.view(1, (0, 2))`` for ``g1 =+ g * v2``."""
        lhs, ld = self.slot(lhs_slot)
        rs = [self.slot(s) for s in rhs_slots]
        if self.gate(lhs_slot) is not None:
            raise ValueError("a gated slot cannot be the written side of a view")
        return Projections(self.product, lhs, tuple(r for r, _ in rs), ld,
                           tuple(d for _, d in rs), self.debug, factors=self.factors,
                           gates=self.regated(rhs_slots))

    def reduction_iterators(self) -> tuple[Symbol, ...]:
        """Iterators the LHS map omits: the emergent reduction axes."""
        used = {s for ix in self.lhs if isinstance(ix, IndexExpr) for _, s in ix.terms}
        return tuple(s for s, _ in self.product if s not in used)

    def lhs_injective(self) -> bool:
        """Distinct product points write distinct LHS cells: every iterator appears in the
        LHS map and each axis's index takes distinct values over its iterators (one
        iterator, or several as mixed-radix digits: ``2*o + k`` with k < 2, a pooling
        window that tiles; ``o + k`` overlaps, not injective). An iterator repeated across
        axes, as in a diagonal write, is fine."""
        seen: set[Symbol] = set()
        for ix in self.lhs:
            if not isinstance(ix, IndexExpr) or (
                    len(ix.terms) > 1 and not _digits(ix, dict(self.product))):
                return False
            seen.update(s for _, s in ix.terms)
        return all(s in seen for s, _ in self.product)

    def lhs_surjective(self) -> bool:
        """Every LHS cell is written: each axis of size > 1 runs over all its cells, by one
        iterator of its size or by iterators as the digits of a mixed radix (``2*o + k``,
        k < 2, o < d / 2), no iterator in two axes."""
        extents = dict(self.product)
        seen: set[Symbol] = set()
        for ix, d in zip(self.lhs, self.lhs_dims, strict=True):
            if d <= 1:
                continue
            if not isinstance(ix, IndexExpr) or ix.offset != 0:
                return False
            if len(ix.terms) == 1:  # (the common case, first)
                c, s = ix.terms[0]
                if c != 1 or s in seen or extents.get(s) != d:
                    return False
                seen.add(s)
                continue
            if any(s not in extents for _, s in ix.terms):
                return False  # a static argument moves the written range
            step = 1
            for c, s in sorted(((c, s) for c, s in ix.terms if extents[s] > 1),
                               key=lambda t: t[0]):
                if c != step or s in seen:
                    return False
                seen.add(s)
                step *= extents[s]
            if step != d:
                return False
        return True


def _digits(ix: IndexExpr, extents: dict[Symbol, int]) -> bool:
    """Whether ``sum c * s`` takes distinct values over the iterators' ranges (symbols not
    in `extents` are constant): mixed radix, each coefficient beyond what the smaller
    ones reach."""
    syms = [s for _, s in ix.terms]
    if len(set(syms)) != len(syms):
        return False
    reach = 0
    for c, e in sorted((abs(c), extents.get(s, 1)) for c, s in ix.terms):
        if e > 1 and c <= reach:
            return False
        reach += c * (e - 1)
    return True


@record
class Arg:
    """The value of RHS operand `k` at its projected index."""

    k: int


@record
class Lit:
    value: float


@record
class Prim:
    """A primitive applied to sub-expressions (the library fuses small trees, e.g. argmax)."""

    op: UnOp | BinOp | TernOp
    args: tuple[RhsExpr, ...]


@record
class StaticValue:
    """The integer value of a routine's static argument (e.g. the step), as a float."""

    symbol: Symbol


RhsExpr = Arg | Lit | Prim | StaticValue


@record
class Accum:
    """`lhs <accum>= expr(rhs...)` over the projections; `initialize_neutral` is the colon of
    `=:+`: the LHS is erased to the accumulator's neutral element where needed."""

    lhs: Buffer
    accum: BinOp  #: ADD, SUB, MUL, DIV, POW, MAX, MIN, or ARG2 for a plain `=:`
    initialize_neutral: bool
    expr: RhsExpr  #: the primitive (tree) applied to the RHS values
    rhs: tuple[Buffer, ...]  #: read tensors, indexed by projections.rhs
    projections: Projections
    label: str = ""  #: for printing: which tensor operation built it
    #: per RHS buffer, its padding margins ((left, right) per axis; () when unpadded):
    #: lowering resets them to the accumulator's neutral element before the accumulation
    rhs_margins: tuple[tuple[tuple[int, int], ...], ...] = ()
    #: the margins' value; None: the neutral element of `accum`
    margin_value: float | None = None


@record
class Block:
    """Many sources, one target (seed 004): the projections carry concatenated axes; at
    each position at most one source is live (the disjoint cover) and is accumulated
    into `lhs`; a position where none is live is a gap, left as `initialize_neutral` says."""

    lhs: Buffer
    accum: BinOp
    initialize_neutral: bool
    rhs: tuple[Buffer, ...]  #: the sources, indexed by projections.rhs
    projections: Projections
    label: str = ""


@record
class RevSides:
    """OCANNL's `Rev_sides` (seed 004): a Block with its sides swapped. `src` (the block's
    target, read at projections.lhs) is scattered to the `targets` (the block's sources,
    written at projections.rhs), at each position to the one live target, accumulating."""

    src: Buffer
    accum: BinOp
    targets: tuple[Buffer, ...]
    projections: Projections  #: the forward block's projections, untouched
    label: str = ""


@record
class ConstantFill:
    value: float


@record
class RangeOverOffsets:
    """Each cell takes its own linear offset."""


@record
class RandomUniform:
    """Each cell: low + (high - low) * threefry uniform keyed by `key`, counter = offset."""

    key: tuple[int, int, int, int]
    low: float
    high: float


@record
class ConstantValues:
    """OCANNL's `Constant_fill` with an array: cell k (layout order) takes `values[k]`,
    unrolled into the code (the count of values equals the buffer's interior size)."""

    values: tuple[float, ...]


FetchOp = ConstantFill | RangeOverOffsets | RandomUniform | ConstantValues


@record
class Fetch:
    buffer: Buffer
    op: FetchOp
    #: padding margins of the buffer ((left, right) per axis; () when unpadded): per-cell
    #: fetches cover the interior only, with the logical offsets
    margins: tuple[tuple[int, int], ...] = ()


@record
class CheckStatic:
    """Fail the routine (error `code`) unless 0 <= symbol < bound (e.g. a batch number)."""

    symbol: Symbol
    bound: int
    code: int


@record
class Noop:
    pass


@record
class Seq:
    items: tuple[Asgn, ...]


@record
class VecSet:
    """A vectorized operation (seed 001): each cell of `rhs` (read in layout order) writes
    `length` consecutive cells of `lhs` (the last vector may be cut at the end of `lhs`)."""

    lhs: Buffer
    op: VecUnOp
    rhs: Buffer
    length: int  #: 16 / bytes of the precision the operation was built for
    label: str = ""


Asgn = Accum | Block | RevSides | Fetch | CheckStatic | Noop | Seq | VecSet


def seq(*items: Asgn) -> Asgn:
    """Flatten into one Seq, dropping Noops. Example: ``seq(Noop(), a)`` is ``a``."""
    flat: list[Asgn] = []
    for it in items:
        match it:
            case Seq(items=inner):
                for x in inner:
                    flat.extend(x.items if isinstance(x, Seq) else [x])
            case Noop():
                pass
            case _:
                flat.append(it)
    flat = [x for x in flat if not isinstance(x, Noop)]
    if not flat:
        return Noop()
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
