"""Shape constraints of an operation (seed 002): its row relations (`infer.relations`, the
one table projections read too) turned into solver constraints, einsum specs expanded.

Input: a Logic value, the result shape and the operand shapes. Output: constraints for
the solver. The logic types are re-exported from `infer.relations`.
"""

from __future__ import annotations

from typing import assert_never

from ..errors import ShapeError
from .concat import AxisKey, discardable
from .constraints import (
    ConcatSum,
    Constraint,
    DimAtLeast,
    DimIneq,
    Origin,
    RowBcast,
    RowEq,
    RowIneq,
)
from .relations import (
    BatchSlice,
    Compose,
    DropLeadingAxis,
    Einsum,
    Logic,
    Pointwise,
    Relation,
    RowBroadcast,
    RowRef,
    RowSame,
    SpecRows,
    Stack,
    StackAxis,
    Terminal,
    Transpose,
    exact_labels,
    logic_name,
    logic_of_string,
    row_relations,
    row_var_key,
)
from .shape import Shape
from .solver import Solver
from .spec_ast import Affine, AxisSpec, Concat, EinsumSpec, FixedIndex, Label, RowSpec, Wildcard
from .terms import AffineDim, ConvPart, Dim, DimTerm, DimVar, Kind, Row, RowVar

__all__ = ["BatchSlice", "Compose", "Einsum", "Logic", "Pointwise", "Stack", "Terminal",
           "Transpose",
           "logic_name", "logic_of_string", "row_var_key", "shape_constraints"]


def shape_constraints(logic: Logic, solver: Solver, result: Shape, operands: list[Shape],
                      origin: Origin) -> list[Constraint]:
    """The constraints an operation contributes to shape inference. Joins the inference
    components of the result and operands: add the constraints to any of their solvers."""
    solver = solver.join(result.solver, *(o.solver for o in operands))
    slots = [result, *operands]
    out: list[Constraint] = []
    op, tensors, span = origin.op, origin.tensors, origin.span
    batch, output = Kind.BATCH, Kind.OUTPUT
    for rel in row_relations(logic, len(operands)):
        if type(rel) is RowBroadcast:  # most relations (every pointwise one): inlined, hot
            c, sb = rel.cur, rel.sub
            cs, ss = slots[c.slot], slots[sb.slot]
            ck, sk = c.kind, sb.kind  # (`Shape.row` and `_kind_name`, inlined)
            cix = 0 if ck is batch else 1 if ck is output else 2
            six = 0 if sk is batch else 1 if sk is output else 2
            cur, sub = cs.raw_rows()[cix], ss.raw_rows()[six]
            if cur is sub and not cur.beg:
                continue  # a row >= itself (`m = 0.9 * m + d`): it holds and binds nothing
            where = f"{cs.label}.{_KIND_NAMES[cix]} >= {ss.label}.{_KIND_NAMES[six]}"
            out.append(RowIneq(cur, sub, Origin(op, tensors, span, where)))
        else:
            out.extend(_relation_constraints(rel, solver, slots, origin))
    return out


#: the rows' names by their index in a shape (batch, output, input)
_KIND_NAMES = ("batch", "output", "input")


def _kind_name(k: Kind) -> str:
    """`k.value` without the enum's descriptor (hot: every broadcast constraint's origin)."""
    return "batch" if k is Kind.BATCH else "output" if k is Kind.OUTPUT else "input"


def _relation_constraints(rel: Relation, solver: Solver, slots: list[Shape],
                          origin: Origin) -> list[Constraint]:
    """One row relation read as shape constraints (seed 002)."""

    def row(ref: RowRef) -> Row:
        return slots[ref.slot].row(ref.kind)

    match rel:
        case RowBroadcast(cur=c, sub=s):
            where = (f"{slots[c.slot].label}.{_kind_name(c.kind)} >= "
                     f"{slots[s.slot].label}.{_kind_name(s.kind)}")
            return [RowIneq(row(c), row(s), origin.at(where))]
        case RowSame(a=a, b=b):
            return [RowEq(row(a), row(b), origin)]
        case DropLeadingAxis(row=r, whole=w):
            rest = solver.fresh_row()
            return [RowEq(row(w), Row.open(rest, (solver.fresh_dim("slice"),)), origin),
                    RowEq(row(r), Row.open(rest), origin)]
        case StackAxis(part=p, whole=w, count=n):
            rest = solver.fresh_row()
            where = f"stacking {slots[p.slot].label} as component {p.slot} of {n}"
            return [RowEq(row(w), Row.open(rest, (Dim(n),)), origin.at(where)),
                    RowEq(row(p), Row.open(rest), origin.at(where))]
        case SpecRows(spec=spec):
            return _einsum_constraints(spec, solver, slots[0], slots[1:], origin)
        case _:
            assert_never(rel)


class _SpecVars:
    """Fresh solver variables for one derivation of an einsum spec.

    The result's rows are the spec's rows exactly. An operand's labeled axis is its own dim
    and an operand's row variable its own row, bounded by the label's dim / the spec's row
    (seed 002: einsum broadcasts like Pointwise_bin; a size-1 axis meets any size, as in
    NumPy). One dim per label per operand, so a diagonal (`ii`) within one operand is exact.
    """

    def __init__(self, solver: Solver, spec: EinsumSpec) -> None:
        self.solver = solver
        self.exact = exact_labels(spec)
        self.labels: dict[str, DimVar] = {}
        self.rows: dict[str, RowVar] = {}
        self.fixed: list[tuple[DimVar, int]] = []  #: fixed-index axes and their index
        self.own_dims: dict[tuple[int, str], DimVar] = {}  #: (operand slot, label) -> dim
        self.own_rows: dict[tuple[int, str], RowVar] = {}  #: (operand slot, row var) -> row
        #: (slot, label, label's dim, operand's dim): the label's >= the operand's
        self.dim_bounds: list[tuple[int, str, DimVar, DimVar]] = []
        #: (slot, row var, spec's row, operand's row): the spec's >= the operand's
        self.row_bounds: list[tuple[int, str, RowVar, RowVar]] = []
        #: concatenated axes: total, parts, discardable flags (seed 004)
        self.sums: list[tuple[DimVar, tuple[DimTerm, ...], tuple[bool, ...]]] = []
        #: per concatenated axis, which components the spec lets fall to 0 (seed 004)
        self.verdicts: dict[AxisKey, tuple[bool, ...]] = discardable(spec)
        self.where: tuple[int, Kind] = (0, Kind.OUTPUT)  #: the row being read

    def concat(self, ax: Concat, pos: int) -> DimVar:
        """A concatenated axis: a fresh total, the sum of its components (ints are sizes)."""
        parts = tuple(Dim(c) if isinstance(c, int) else self.label(c.name)
                      for c in ax.components)
        flags = self.verdicts.get((*self.where, pos), tuple(False for _ in parts))
        total = self.solver.fresh_dim("^")
        self.sums.append((total, parts, flags))
        return total

    def label(self, name: str) -> DimVar:
        if name not in self.labels:
            self.labels[name] = self.solver.fresh_dim(name)
        return self.labels[name]

    def row_var(self, key: str) -> RowVar:
        if key not in self.rows:
            self.rows[key] = self.solver.fresh_row()
        return self.rows[key]

    def axis(self, ax: AxisSpec, slot: int, pos: int = 0) -> DimTerm:
        match ax:
            case Label(name=n) if slot > 0 and n not in self.exact:
                if (slot, n) not in self.own_dims:
                    self.own_dims[(slot, n)] = self.solver.fresh_dim(n)
                    self.dim_bounds.append((slot, n, self.label(n), self.own_dims[(slot, n)]))
                return self.own_dims[(slot, n)]
            case Label(name=n):
                return self.label(n)
            case FixedIndex(value=c):
                v = self.solver.fresh_dim("_")
                self.fixed.append((v, c))
                return v
            case Wildcard():
                return self.solver.fresh_dim("_")
            case Affine(stride=st, over=over, offset=off, conv=conv):
                cp = None
                if conv is not None:
                    cp = ConvPart(conv.dilation, self.label(conv.kernel), conv.use_padding)
                return AffineDim(st, self.label(over), off, cp)
            case Concat():
                return self.concat(ax, pos)
            case _:
                assert_never(ax)

    def row(self, spec: RowSpec | None, kind: Kind, slot: int) -> Row:
        """The spec's row for tensor `slot` (0 the result)."""
        if spec is None:
            return Row.closed(())
        self.where = (slot, kind)
        beg = tuple(self.axis(a, slot, j) for j, a in enumerate(spec.beg))
        end = tuple(self.axis(a, slot, len(spec.beg) + j) for j, a in enumerate(spec.end))
        if spec.var is None:
            return Row.closed(beg + end)
        key = row_var_key(spec.var, kind)
        if slot == 0:
            return Row.open(self.row_var(key), beg, end)
        if (slot, key) not in self.own_rows:
            self.own_rows[(slot, key)] = self.solver.fresh_row()
            self.row_bounds.append((slot, spec.var, self.row_var(key),
                                    self.own_rows[(slot, key)]))
        return Row.open(self.own_rows[(slot, key)], beg, end)

    def bound_constraints(self, slots: list[Shape], origin: Origin) -> list[Constraint]:
        """spec's label dim >= the operand's axis; spec's row variable >= the operand's."""
        def at(slot: int, name: str) -> Origin:
            return origin.at(f"{slots[slot].label} axes '{name}' vs the spec's")

        out: list[Constraint] = [DimIneq(d, own, at(slot, n), label=True)
                                 for slot, n, d, own in self.dim_bounds]
        out.extend(RowBcast(Row.open(r), Row.open(own), at(slot, n))
                   for slot, n, r, own in self.row_bounds)
        return out


def _einsum_constraints(spec: EinsumSpec, solver: Solver, result: Shape, operands: list[Shape],
                        origin: Origin) -> list[Constraint]:
    if len(spec.operands) != len(operands):
        raise ShapeError(f'einsum spec "{spec.text}" has {len(spec.operands)} operand(s), '
                         f"called with {len(operands)}", origin.span)
    sv = _SpecVars(solver, spec)
    out: list[Constraint] = []
    for slot, (sh, ss) in enumerate([(result, spec.result),
                                     *zip(operands, spec.operands, strict=True)]):
        for kind, rs in ((Kind.BATCH, ss.batch), (Kind.OUTPUT, ss.output),
                         (Kind.INPUT, ss.input)):
            where = f"{sh.label}.{kind.value} vs spec"
            out.append(RowEq(sh.row(kind), sv.row(rs, kind, slot), origin.at(where)))
    out.extend(sv.bound_constraints([result, *operands], origin))
    for v, c in sv.fixed:
        out.append(DimAtLeast(v, c + 1, origin.at(f"fixed index {c}")))
    for total, parts, flags in sv.sums:
        out.append(ConcatSum(total, parts, flags, origin.at("concatenated axis")))
    return out
