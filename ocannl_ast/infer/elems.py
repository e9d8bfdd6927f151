"""Element-count constraints (seed 001 part 2): Total_elems over a whole tensor with a
literal (Num_elems) or strided (`coeff * v`) numerator, and Exact rows.

A reshape-style data init constrains only its element count (`total_elems`); literal data
pins its axes exactly (`exact`); a vectorized operation relates its two ends: the input is
`Exact [v]` (one axis) and the output has `coeff * v` elements (`strided_total`).

Strided counts are read with a partial last vector: an output of `n` elements needs
`v = ceil(n / coeff)` input cells (the vectorized write drops the surplus of the last one),
so any output size has exactly one input size. Solving the other way, a known `v` with one
unknown output axis gives the full count `coeff * v` (seed 001's reading).

Input: constraints built by the tensor layer. Output: bindings through `SolverState`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from .constraints import Origin, RowEq, RowsTotal, StridedVar, conflict
from .terms import Dim, DimTerm, DimVar, Row, dim_size

if TYPE_CHECKING:
    from .state import SolverState


class ShapeRows(Protocol):
    """What the element-count constraints need of a tensor's shape (`infer.shape.Shape`)."""

    label: str

    def raw_rows(self) -> tuple[Row, Row, Row]: ...


def exact(shape: ShapeRows, batch: tuple[DimTerm, ...], output: tuple[DimTerm, ...],
          input_: tuple[DimTerm, ...], origin: Origin) -> list[RowEq]:
    """Exact rows: the shape has exactly these axes (no row variable left open)."""
    b, o, i = shape.raw_rows()
    return [RowEq(b, Row.closed(batch), origin.at(f"{shape.label}.batch exact")),
            RowEq(o, Row.closed(output), origin.at(f"{shape.label}.output exact")),
            RowEq(i, Row.closed(input_), origin.at(f"{shape.label}.input exact"))]


def total_elems(shape: ShapeRows, n: int | StridedVar, origin: Origin) -> RowsTotal:
    """Total_elems: the shape's three rows multiply to `n` (or `coeff * v`) elements."""
    return RowsTotal(shape.raw_rows(), n, origin.at(f"{shape.label} element count"))


def strided_count(n: int, coeff: int) -> int:
    """How many input cells a vectorized op of ratio `coeff` needs for `n` outputs."""
    return -(-n // coeff)


def rows_total(s: SolverState, c: RowsTotal) -> bool:
    """Propagate one RowsTotal; False while it must wait (an open row, two unknowns)."""
    rows = [s.subst_row(r) for r in c.rows]
    if any(r.var is not None for r in rows):
        return False
    prod, unknown = 1, []
    for d in (d for r in rows for d in r.dims):
        size = dim_size(d)
        if size is None:
            unknown.append(d)
        else:
            prod *= size
    num = c.numerator
    if isinstance(num, StridedVar):
        v = s.subst_dim(num.var)
        vsize = dim_size(v)
        if vsize is None:
            if unknown or not isinstance(v, DimVar):
                return False
            s.bind_dim(v, Dim(strided_count(prod, num.coeff)), c.origin)
            return True
        if not unknown:
            if strided_count(prod, num.coeff) != vsize:
                raise conflict(c.origin, f"{prod} elements need {strided_count(prod, num.coeff)}"
                                f" vector cells of {num.coeff}, but the input has {vsize}")
            return True
        return _solve_one(s, unknown, prod, num.coeff * vsize, c.origin)
    if not unknown:
        if prod != num:
            raise conflict(c.origin, f"the tensor has {prod} elements, expected {num}")
        return True
    return _solve_one(s, unknown, prod, num, c.origin)


def _solve_one(s: SolverState, unknown: list[DimTerm], prod: int, n: int, o: Origin) -> bool:
    if len(unknown) != 1 or not isinstance(unknown[0], DimVar):
        return False
    if prod == 0 or n % prod:
        raise conflict(o, f"{n} elements do not divide into axes of product {prod}")
    s.bind_dim(unknown[0], Dim(n // prod), o)
    return True
