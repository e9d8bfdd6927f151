"""Shape logic of an operation (seed 002 `Shape.logic`) and the constraints it emits.

Input: a Logic value, the result shape and the operand shapes. Output: constraints for
the solver; projection derivation (`infer.projections`) re-reads the same logic.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ShapeError
from ..lowering.loop_ir import Symbol
from .constraints import Constraint, DimAtLeast, Origin, RowEq, RowIneq
from .shape import Shape
from .solver import Solver
from .spec_ast import Affine, AxisSpec, Concat, EinsumSpec, FixedIndex, Label, RowSpec, Wildcard
from .spec_parser import parse_spec
from .terms import AffineDim, ConvPart, DimTerm, DimVar, Kind, Row, RowVar


@dataclass(frozen=True, slots=True)
class Pointwise:
    """NumPy-style broadcast of every operand into the result (unary or n-ary)."""


@dataclass(frozen=True, slots=True)
class Compose:
    """Outputs of the second operand meet inputs of the first (`a @ b`, matmul generalised)."""


@dataclass(frozen=True, slots=True)
class Transpose:
    """Swap inputs and outputs of the single operand; batch axes kept."""


@dataclass(frozen=True, slots=True)
class Einsum:
    """Axes lined up by an einsum spec: equalities, no broadcasting."""

    spec: EinsumSpec


@dataclass(frozen=True, slots=True)
class BatchSlice:
    """Drop the leading batch axis, read at a runtime index (a routine's static argument)."""

    symbol: Symbol


@dataclass(frozen=True, slots=True)
class Terminal:
    """A leaf: the shape comes from its creation (data, parameter dims)."""


Logic = Pointwise | Compose | Transpose | Einsum | BatchSlice | Terminal


def logic_of_string(text: str) -> Logic:
    """`"."` pointwise, `"@"` compose, `"T"` transpose, anything else an einsum spec.

    Example: ``logic_of_string("ij;jk=>ik")``.
    """
    match text:
        case ".":
            return Pointwise()
        case "@":
            return Compose()
        case "T":
            return Transpose()
        case _:
            return Einsum(parse_spec(text))


def logic_name(logic: Logic) -> str:
    match logic:
        case Pointwise():
            return "pointwise"
        case Compose():
            return "compose"
        case Transpose():
            return "transpose"
        case Einsum(spec=spec):
            return f'einsum "{spec.text}"'
        case BatchSlice():
            return "batch_slice"
        case Terminal():
            return "terminal"
        case _:
            raise AssertionError(logic)


_B, _O, _I = Kind.BATCH, Kind.OUTPUT, Kind.INPUT


def shape_constraints(logic: Logic, solver: Solver, result: Shape, operands: list[Shape],
                      origin: Origin) -> list[Constraint]:
    """The constraints an operation contributes to shape inference. Joins the inference
    components of the result and operands: add the constraints to any of their solvers."""
    r = result
    solver = solver.join(result.solver, *(o.solver for o in operands))

    def ineq(cur: Shape, ck: Kind, sub: Shape, sk: Kind) -> RowIneq:
        where = f"{cur.label}.{ck.value} >= {sub.label}.{sk.value}"
        return RowIneq(cur.row(ck), sub.row(sk), origin.at(where))

    match logic:
        case Pointwise():
            return [ineq(r, k, a, k) for a in operands for k in (_B, _O, _I)]
        case Compose():
            _arity(logic, operands, 2)
            a, b = operands
            return [ineq(r, _B, a, _B), ineq(r, _B, b, _B), ineq(r, _I, b, _I),
                    ineq(r, _O, a, _O), ineq(a, _I, b, _O)]
        case Transpose():
            _arity(logic, operands, 1)
            (a,) = operands
            return [ineq(r, _B, a, _B), ineq(r, _I, a, _O), ineq(r, _O, a, _I)]
        case Einsum(spec=spec):
            return _einsum_constraints(spec, solver, result, operands, origin)
        case BatchSlice():
            _arity(logic, operands, 1)
            (a,) = operands
            rest = solver.fresh_row()
            return [RowEq(a.row(_B), Row.open(rest, (solver.fresh_dim("slice"),)), origin),
                    RowEq(r.row(_B), Row.open(rest), origin),
                    RowEq(r.row(_O), a.row(_O), origin), RowEq(r.row(_I), a.row(_I), origin)]
        case Terminal():
            return []
        case _:
            raise AssertionError(logic)


def _arity(logic: Logic, operands: list[Shape], n: int) -> None:
    if len(operands) != n:
        raise ShapeError(f"{logic_name(logic)} takes {n} operand(s), got {len(operands)}")


class _SpecVars:
    """Fresh solver variables for one derivation of an einsum spec."""

    def __init__(self, solver: Solver) -> None:
        self.solver = solver
        self.labels: dict[str, DimVar] = {}
        self.rows: dict[str, RowVar] = {}
        self.fixed: list[tuple[DimVar, int]] = []  #: fixed-index axes and their index

    def label(self, name: str) -> DimVar:
        if name not in self.labels:
            self.labels[name] = self.solver.fresh_dim(name)
        return self.labels[name]

    def axis(self, ax: AxisSpec) -> DimTerm:
        match ax:
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
                raise ShapeError("concatenation specs ('^') are not supported by the solver yet")
            case _:
                raise AssertionError(ax)

    def row(self, spec: RowSpec | None, kind: Kind) -> Row:
        if spec is None:
            return Row.closed(())
        beg = tuple(self.axis(a) for a in spec.beg)
        end = tuple(self.axis(a) for a in spec.end)
        if spec.var is None:
            return Row.closed(beg + end)
        key = row_var_key(spec.var, kind)
        if key not in self.rows:
            self.rows[key] = self.solver.fresh_row()
        return Row.open(self.rows[key], beg, end)


def row_var_key(name: str, kind: Kind) -> str:
    """As in OCANNL, the ellipsis `...` is a different row variable in each row kind (batch,
    input, output); a named `..v..` is one variable wherever it appears."""
    return f"...{kind.value}" if name == "..." else name


def _einsum_constraints(spec: EinsumSpec, solver: Solver, result: Shape, operands: list[Shape],
                        origin: Origin) -> list[Constraint]:
    if len(spec.operands) != len(operands):
        raise ShapeError(f'einsum spec "{spec.text}" has {len(spec.operands)} operand(s), '
                         f"called with {len(operands)}", origin.span)
    sv = _SpecVars(solver)
    out: list[Constraint] = []
    for sh, ss in [(result, spec.result), *zip(operands, spec.operands, strict=True)]:
        for kind, rs in ((_B, ss.batch), (_O, ss.output), (_I, ss.input)):
            where = f"{sh.label}.{kind.value} vs spec"
            out.append(RowEq(sh.row(kind), sv.row(rs, kind), origin.at(where)))
    for v, c in sv.fixed:
        out.append(DimAtLeast(v, c + 1, origin.at(f"fixed index {c}")))
    return out
