"""Projection inference (seed 000, stride part of seed 001): per operation, fresh axis ids,
the operation's row relations (`infer.relations`, the table shape inference reads) re-read
as equations, union-find with pinning, then labeling.

Input: an operation's Logic and the closed dims of its result and operands. Output: a
`Projections` record: the product space and one affine index map per tensor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import assert_never

from ..errors import ShapeError
from ..lowering.assignments import Projections, ProjIndex
from ..lowering.ids import fresh_id
from ..lowering.loop_ir import IndexExpr, Symbol
from ..records import record
from .concat import discardable
from .coupling import Coupling
from .padding import padding_margins
from .relations import (
    DropLeadingAxis,
    Logic,
    Relation,
    RowBroadcast,
    RowRef,
    RowSame,
    SpecRows,
    StackAxis,
    exact_labels,
    logic_name,
    row_relations,
    row_var_key,
)
from .spec_ast import Affine, AxisSpec, Concat, EinsumSpec, FixedIndex, Label, RowSpec, Wildcard
from .terms import Kind, kernel_span

ShapeDims = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]  # batch, output, input
_ROW_IX = {Kind.BATCH: 0, Kind.OUTPUT: 1, Kind.INPUT: 2}  #: a row's place in ShapeDims
_Seg = tuple[int, tuple[int, ...]]  #: a tensor slot and axis ids (a label's or row var's)

def fresh_symbol(name: str) -> Symbol:
    """A loop iterator or static argument with a process-unique id."""
    return Symbol(fresh_id(), name)


class _UnionFind:
    """Axis ids with sizes; classes may be pinned to a fixed index or a runtime symbol."""

    def __init__(self, op: str) -> None:
        self.op = op
        self.parent: list[int] = []
        self.size: list[int] = []
        self.pin: dict[int, int | Symbol] = {}

    def new(self, size: int) -> int:
        self.parent.append(len(self.parent))
        self.size.append(size)
        return len(self.parent) - 1

    def find(self, a: int) -> int:
        while self.parent[a] != a:
            self.parent[a] = self.parent[self.parent[a]]
            a = self.parent[a]
        return a

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return
        if self.size[ra] != self.size[rb]:
            raise ShapeError(f"projections of {self.op}: axes of sizes {self.size[ra]} and "
                             f"{self.size[rb]} must iterate together")
        self.parent[rb] = ra
        if rb in self.pin:
            self.pin_to(ra, self.pin.pop(rb))

    def pin_to(self, a: int, idx: int | Symbol) -> None:
        r = self.find(a)
        if r in self.pin and self.pin[r] != idx:
            raise ShapeError(f"projections of {self.op}: an axis is pinned to both "
                             f"{self.pin[r]} and {idx}")
        self.pin[r] = idx


@record
class _Derived:
    """An axis whose index is computed from other classes (stride, optional kernel)."""

    stride: int
    over: str
    offset: int
    kernel: str | None
    dilation: int
    use_padding: bool = False


class _Derivation:
    """One operation's projection derivation: axis ids per tensor, equations, labeling."""

    def __init__(self, logic: Logic, lhs: ShapeDims, rhs: list[ShapeDims]) -> None:
        self.logic = logic
        self.uf = _UnionFind(logic_name(logic))
        self.tensors = [lhs, *rhs]
        self.ids = [tuple(tuple(self.uf.new(n) for n in row) for row in t) for t in self.tensors]
        self.derived: dict[int, _Derived] = {}
        self.labels: dict[str, list[int]] = {}
        self.concats = Coupling(self.uf.op)  #: concatenated axes (seed 004)
        self.slot = 0  #: the tensor whose spec row `match_row` is reading
        self.label_slots: dict[str, list[int]] = {}  #: parallel to `labels`
        self.stacked: dict[int, int] = {}  #: stacked axis id -> count
        self.gates: dict[int, str] = {}  #: operand index -> its stacking component label
        self.severed: list[tuple[int, int]] = []  #: (size-1 axis read at 0, axis it meets)

    def ineq(self, cur: tuple[int, ...], sub: tuple[int, ...]) -> None:
        """Rules 2, 3, 5: align from the right; a size-one sub axis is severed at 0."""
        if len(sub) > len(cur):
            raise ShapeError(f"projections of {self.uf.op}: {len(sub)} axes do not broadcast "
                             f"into {len(cur)}")
        for j in range(1, len(sub) + 1):
            a, b = cur[-j], sub[-j]
            if self.uf.size[b] == 1 and self.uf.size[a] != 1:
                self.uf.pin_to(b, 0)
                self.severed.append((b, a))
            else:
                self.uf.union(a, b)

    def equal(self, x: tuple[int, ...], y: tuple[int, ...]) -> None:
        if len(x) != len(y):
            raise ShapeError(f"projections of {self.uf.op}: rank mismatch {len(x)} vs {len(y)}")
        for a, b in zip(x, y, strict=True):
            self.uf.union(a, b)

    def run(self) -> None:
        """Read the operation's row relations (the table shape inference reads too) as
        iterate-together equations."""
        for rel in row_relations(self.logic, len(self.ids) - 1):
            self.relation(rel)

    def relation(self, rel: Relation) -> None:
        def row(ref: RowRef) -> tuple[int, ...]:
            return self.ids[ref.slot][_ROW_IX[ref.kind]]

        match rel:
            case RowBroadcast(cur=c, sub=sub):
                self.ineq(row(c), row(sub))
            case RowSame(a=a, b=b):
                self.equal(row(a), row(b))
            case DropLeadingAxis(row=r, whole=w, symbol=sym):
                if not row(w):
                    raise ShapeError("batch_slice of a tensor without batch axes")
                self.uf.pin_to(row(w)[0], sym)
                self.equal(row(r), row(w)[1:])
            case StackAxis(part=p, whole=w, index=k, count=n):
                self.stack_axis(row(p), row(w), k, n)
            case SpecRows(spec=spec):
                self.concats.verdicts = discardable(spec)
                self.einsum(spec)
            case _:
                assert_never(rel)

    def stack_axis(self, part: tuple[int, ...], whole: tuple[int, ...], k: int,
                   n: int) -> None:
        """Stacking (seed 004): the whole row's leading axis is the regular coupled factor
        of `n` size-1 components (one per operand); the part iterates with the rest."""
        if not whole or self.uf.size[whole[0]] != n:
            raise ShapeError(f"projections of {self.uf.op}: the stacked row does not lead "
                             f"with an axis of size {n}")
        if whole[0] not in self.stacked:
            self.stacked[whole[0]] = n
            self.concats.add(whole[0], tuple(1 for _ in range(n)), self.labels, self.uf.new)
        self.gates[k] = f"^{whole[0]}.{k}"
        self.equal(part, whole[1:])

    def einsum(self, spec: EinsumSpec) -> None:
        exact = exact_labels(spec)
        segments: dict[str, list[_Seg]] = {}
        for slot, (ids, ss) in enumerate(zip(self.ids, [spec.result, *spec.operands],
                                             strict=True)):
            self.slot = slot
            self.concats.slot = slot
            for rs, row, kind in ((ss.batch, ids[0], Kind.BATCH), (ss.output, ids[1], Kind.OUTPUT),
                                  (ss.input, ids[2], Kind.INPUT)):
                self.match_row(rs, row, kind, segments)
        for name, group in self.labels.items():
            if name not in self.label_slots:  # an integer concat component's internal label
                continue
            slots = self.label_slots[name]
            members: list[_Seg] = [(s, (i,)) for i, s in zip(group, slots, strict=True)]
            self.check_diagonals(name, members)
            if name in exact:  # affine / concatenation labels: no broadcasting
                for x in group[1:]:
                    self.uf.union(group[0], x)
            else:
                self.labels[name] = list(self.broadcast_class(name, members))
        for name, segs in segments.items():
            self.broadcast_class(name, segs)

    def check_diagonals(self, name: str, members: list[_Seg]) -> None:
        """A label repeated within one tensor (a diagonal) has one size there: it does not
        broadcast against itself (NumPy rejects `ii` on a 1x3 operand too)."""
        for slot in {s for s, _ in members}:
            sizes = {self.uf.size[seg[0]] for s, seg in members if s == slot}
            if len(sizes) > 1:
                raise ShapeError(f"projections of {self.uf.op}: label '{name}' has axes of "
                                 f"sizes {sorted(sizes)} in one tensor")

    def broadcast_class(self, name: str, members: list[_Seg]) -> tuple[int, ...]:
        """The axes a label or row variable stands for: the result's axes iterate with them
        exactly; an operand's may be fewer (a row variable) or of size 1, read at position 0
        (broadcast, as `ineq`; shape inference bounds them: spec >= operand)."""
        n = max(len(seg) for _, seg in members)
        spec_axes = []
        for j in range(n, 0, -1):
            sizes = [self.uf.size[seg[-j]] for _, seg in members if len(seg) >= j]
            spec_axes.append(self.uf.new(next((x for x in sizes if x != 1), 1)))
        axes = tuple(spec_axes)
        for slot, seg in members:
            if slot == 0 and len(seg) != n:
                raise ShapeError(f"projections of {self.uf.op}: '{name}' covers {n} axes in "
                                 f"an operand but {len(seg)} in the result")
            if slot == 0:
                self.equal(axes, seg)
            else:
                self.ineq(axes, seg)
        return axes

    def match_row(self, rs: RowSpec | None, row: tuple[int, ...], kind: Kind,
                  segments: dict[str, list[_Seg]]) -> None:
        if rs is None:
            rs = RowSpec((), None, ())
        nb, ne = len(rs.beg), len(rs.end)
        if len(row) < nb + ne or (rs.var is None and len(row) != nb + ne):
            raise ShapeError(f"projections of {self.uf.op}: a row of {len(row)} axes does not "
                             f"match the spec's {nb + ne}")
        self.concats.kind = kind
        for pos, (ax, i) in enumerate(zip(rs.beg + rs.end, row[:nb] + row[len(row) - ne:],
                                          strict=True)):
            self.concats.pos = pos
            self.axis(ax, i)
        if rs.var is not None:
            segments.setdefault(row_var_key(rs.var, kind), []).append(
                (self.slot, row[nb:len(row) - ne]))

    def axis(self, ax: AxisSpec, i: int) -> None:
        match ax:
            case Label(name=n):
                self.labels.setdefault(n, []).append(i)
                self.label_slots.setdefault(n, []).append(self.slot)
            case FixedIndex(value=c):
                if not 0 <= c < self.uf.size[i]:
                    raise ShapeError(f"projections of {self.uf.op}: fixed index {c} is out of "
                                     f"range for an axis of size {self.uf.size[i]}")
                self.uf.pin_to(i, c)
            case Wildcard():
                pass
            case Affine(stride=st, over=over, offset=off, conv=conv):
                kern, dil = (conv.kernel, conv.dilation) if conv else (None, 0)
                self.derived[i] = _Derived(st, over, off, kern, dil,
                                           conv is not None and conv.use_padding)
            case Concat(components=comps):
                self.concats.add(i, comps, self.labels, self.uf.new)
            case _:
                assert_never(ax)

    # ---- labeling (closing the classes) --------------------------------------------

    def label(self) -> Projections:
        """Pinned classes take their pin, iterated classes of size other than 1 a fresh
        iterator (size 0: a loop that runs zero times), size-1 classes Fix(0); derived (affine) axes are evaluated in a second stratum."""
        self.virtual_labels()
        self.check_affine_bounds()
        product: list[tuple[Symbol, int]] = []
        memo: dict[int, IndexExpr] = {}
        factors, concat_ix = self.concats.couple(self.uf, self.labels, memo)

        def cls(i: int) -> IndexExpr:
            r = self.uf.find(i)
            if r not in memo:
                p = self.uf.pin.get(r)
                if isinstance(p, Symbol):
                    memo[r] = IndexExpr(((1, p),), 0)
                elif p is not None:
                    memo[r] = IndexExpr((), p)
                elif self.uf.size[r] != 1:  # size 0 iterates zero times
                    sym = fresh_symbol("i")
                    product.append((sym, self.uf.size[r]))
                    memo[r] = IndexExpr(((1, sym),), 0)
                else:
                    memo[r] = IndexExpr((), 0)
            return memo[r]

        maps: list[list[ProjIndex | None]] = []
        for t in self.ids:
            flat = [i for row in t for i in row]
            maps.append([concat_ix[i] if i in concat_ix else None if i in self.derived
                         else cls(i) for i in flat])
        margins: list[tuple[int, int, int, int]] = []
        for slot, (m, t) in enumerate(zip(maps, self.ids, strict=True)):
            flat = [i for row in t for i in row]
            for k, i in enumerate(flat):
                if m[k] is None:
                    m[k], pad = self.affine_index(self.derived[i], cls)
                    if pad != (0, 0):
                        margins.append((slot, k, *pad))
        full = [tuple(x for x in m if x is not None) for m in maps]
        dims = [tuple(n for row in t for n in row) for t in self.tensors]
        gates = tuple(self.gate(k, memo) for k in range(len(full) - 1))
        return Projections(tuple(product), full[0], tuple(full[1:]), dims[0], tuple(dims[1:]),
                           self.uf.op, margins=tuple(margins), factors=factors,
                           gates=gates if any(g is not None for g in gates) else ())

    def gate(self, k: int, memo: dict[int, IndexExpr]) -> Symbol | None:
        """The component iterator operand `k` (of a stack) is live under, if any."""
        if k not in self.gates:
            return None
        terms = memo[self.uf.find(self.labels[self.gates[k]][0])].terms
        return terms[0][1]

    def virtual_labels(self) -> None:
        """A label seen only inside affine axes gets a class sized from the affine axis."""
        for i, d in sorted(self.derived.items()):
            if d.kernel is not None and d.kernel not in self.labels:
                raise ShapeError(f"projections of {self.uf.op}: kernel label '{d.kernel}' "
                                 "indexes no axis")
            if d.over in self.labels:
                continue
            n = self.uf.size[i]
            if d.kernel is None or d.use_padding:
                over = n // d.stride
            else:
                k = self.uf.size[self.uf.find(self.labels[d.kernel][0])]
                over = max((n - d.offset - kernel_span(k, d.dilation)) // d.stride + 1, 0)
            self.labels[d.over] = [self.uf.new(over)]

    def check_affine_bounds(self) -> None:
        """Every affine index stays inside its axis: `stride * (over - 1) + offset +
        dilation * (kernel - 1) < size` (shape inference sizes the axes so; this guards it),
        and every affine term denotes its whole axis (`check_affine_agreement`)."""
        for i, d in sorted(self.derived.items()):
            over = self.uf.size[self.uf.find(self.labels[d.over][0])]
            k = 1 if d.kernel is None else self.uf.size[self.uf.find(self.labels[d.kernel][0])]
            if over == 0 or k == 0:
                continue  # never addressed
            self.check_affine_agreement(i, d, over, k)
            if d.use_padding:
                continue  # the buffer's margins absorb the overrun
            top = d.stride * (over - 1) + d.offset + d.dilation * (k - 1)
            if top >= self.uf.size[i]:
                raise ShapeError(f"projections of {self.uf.op}: the affine index reaches "
                                 f"position {top} of an axis of size {self.uf.size[i]}")

    def check_affine_agreement(self, i: int, d: _Derived, over: int, k: int) -> None:
        """Second stratum (seed 001): the affine terms sharing the label `over` must denote
        the same extent of it. Each term fixes `over` from its axis (`size = stride*over`
        striding or padded, `stride*(over-1) + offset + span` valid); two terms over one
        label, or a term and a plain axis of that label, that disagree are contradictory."""
        size = self.uf.size[i]
        if d.kernel is None or d.use_padding:
            want, form = d.stride * over, f"{d.stride}*{over}"
        else:
            span = kernel_span(k, d.dilation)
            want = d.stride * (over - 1) + d.offset + span
            form = f"{d.stride}*({over}-1) + {d.offset} + span {span}"
        if want != size:
            raise ShapeError(f"projections of {self.uf.op}: contradictory affine terms over "
                             f"'{d.over}': '{d.over}' iterates {over} positions, so this "
                             f"axis must have {form} = {want} positions, but it has {size}")

    def affine_index(self, d: _Derived, cls: _ClassIndex) -> tuple[IndexExpr, tuple[int, int]]:
        """Second stratum: `stride*over + dilation*kernel + offset - left`, and the margins
        (left, right) a padded axis needs (`infer.padding`)."""
        terms: dict[Symbol, int] = {}
        pad = (0, 0)
        if d.use_padding and d.kernel is not None:
            k = self.uf.size[self.uf.find(self.labels[d.kernel][0])]
            pad = padding_margins(k, d.dilation)
        offset = d.offset - pad[0]
        parts = [(d.stride, cls(self.labels[d.over][0]))]
        if d.kernel is not None:
            parts.append((d.dilation, cls(self.labels[d.kernel][0])))
        for coeff, ix in parts:
            offset += coeff * ix.offset
            for c, s in ix.terms:
                terms[s] = terms.get(s, 0) + coeff * c
        return IndexExpr(tuple((c, s) for s, c in terms.items() if c != 0), offset), pad


_ClassIndex = Callable[[int], IndexExpr]


def derive_projections(logic: Logic, lhs: ShapeDims, rhs: list[ShapeDims]) -> Projections:
    """Projections of one operation from its logic and closed dims (seed 000).

    Example: matmul ``derive_projections(Compose(), ((), (2,), (4,)), [((), (2,), (3,)),
    ((), (3,), (4,))])`` has 3 iterators, one of them a reduction.
    """
    try:
        key = (logic, lhs, tuple(rhs))
        known = _DERIVED.get(key)
    except TypeError:  # an unhashable logic: derive it every time
        key, known = None, None
    if known is not None:
        return _renamed(known)
    d = _Derivation(logic, lhs, rhs)
    d.run()
    out = d.label()
    if key is not None and _reusable(out):
        if len(_DERIVED) >= _MAX_DERIVED:
            _DERIVED.clear()
        _DERIVED[key] = out
    return out


def reduced_broadcasts(logic: Logic, lhs: ShapeDims, rhs: list[ShapeDims]
                       ) -> list[tuple[int, int, int, int, int]]:
    """The operands' size-1 axes read at position 0 (broadcast) along a summed-over class
    (not the result's) that another operand's axis of size n > 1 iterates: ``(slot, axis,
    other slot, other axis, n)``, operands numbered from 1, axes counted across the rows.
    Such a product multiplies one cell by the sum of the other's axis (`x @ w` with x of 1
    feature and w of 3). Example: ``reduced_broadcasts(Compose(), ((), (2,), ()),
    [((), (2,), (3,)), ((), (1,), ())])`` -> ``[(2, 0, 1, 1, 3)]``."""
    d = _Derivation(logic, lhs, rhs)
    d.run()
    where = {i: (slot, k) for slot, t in enumerate(d.ids)
             for k, i in enumerate(i for row in t for i in row)}
    in_result = {d.uf.find(i) for row in d.ids[0] for i in row}
    out: list[tuple[int, int, int, int, int]] = []
    for b, a in d.severed:
        r = d.uf.find(a)
        if r in in_result or b not in where:
            continue
        hit = next((i for i, (s, _) in where.items() if s >= 1 and s != where[b][0]
                    and d.uf.find(i) == r and d.uf.size[i] > 1), None)
        if hit is not None:
            out.append((*where[b], *where[hit], d.uf.size[hit]))
    return out


#: derivations by (logic, lhs dims, rhs dims): a deep network derives the same few again
#: and again (every layer's matmul, every parameter's optimizer step)
_DERIVED: dict[tuple[Logic, ShapeDims, tuple[ShapeDims, ...]], Projections] = {}
_MAX_DERIVED = 1 << 12


def _reusable(p: Projections) -> bool:
    """Whether `p` is a plain derivation: fresh iterators in `product` only (created in
    its order), index maps of plain index expressions, no margins, factors or gates."""
    return not (p.margins or p.factors or p.gates) and all(
        isinstance(ix, IndexExpr) for m in (p.lhs, *p.rhs) for ix in m)


def _renamed(p: Projections) -> Projections:
    """A reused derivation with fresh iterators, created in the order `label` creates
    them (the same ids a derivation anew would take)."""
    new = {s: fresh_symbol(s.name) for s, _ in p.product}
    done: dict[int, tuple[ProjIndex, IndexExpr]] = {}  #: (each index renamed once)

    def ix(e: ProjIndex) -> IndexExpr:
        hit = done.get(id(e))
        if hit is not None:
            return hit[1]
        assert isinstance(e, IndexExpr)
        out = IndexExpr(tuple([(c, new.get(s, s)) for c, s in e.terms]), e.offset)
        done[id(e)] = (e, out)
        return out

    return Projections(tuple((new[s], n) for s, n in p.product), tuple(ix(e) for e in p.lhs),
                       tuple(tuple(ix(e) for e in m) for m in p.rhs), p.lhs_dims, p.rhs_dims,
                       p.debug)
