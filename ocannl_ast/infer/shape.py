"""Tensor shapes (seed 002): three rows (batch, output, input) as terms in a solver.

Each new shape starts its own inference component (a fresh `Solver`); an operation joins
the components of its shapes (`join_shapes`), so a solver holds one connected graph only.

Input: dims given at tensor creation (or None, left to inference). Output: solved
tuples of ints and OCANNL notation ("2|3->4"), read through the solver's substitution.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import ShapeError, Span, user_span
from ..lowering.ids import fresh_id
from .solver import Solver
from .terms import Dim, DimTerm, Kind, Row, dim_size, show_row

DimsArg = Sequence[int | tuple[int, str] | Dim] | None


def _row_of(solver: Solver, dims: DimsArg) -> Row:
    if dims is None:
        return Row((), solver.fresh_row(), ())  # (`Row.open`, without its copies: hot)
    out: list[DimTerm] = []
    for d in dims:
        if isinstance(d, Dim):
            out.append(d)
        elif isinstance(d, tuple):
            out.append(Dim(int(d[0]), d[1]))
        else:
            if int(d) < 0:
                raise ShapeError(f"negative dimension {d}")
            out.append(Dim(int(d)))
    return Row.closed(out)


class Shape:
    """The shape of one tensor: rows held as solver terms; reading them closes if needed.

    Example: ``Shape.make("x", batch_dims=[2], input_dims=[3], output_dims=[4])`` prints
    as ``2|3->4``.
    """

    def __init__(self, solver: Solver, label: str, batch: Row, output: Row, input_: Row,
                 *, is_param: bool = False, is_terminal: bool = False,
                 span: Span | None = None) -> None:
        self._solver = solver
        self.label = label
        self.id = fresh_id()
        self._rows = (batch, output, input_)
        #: each row's sizes once read closed outside a solver transaction (they never change)
        self._closed: list[tuple[int, ...] | None] = [None, None, None]
        #: `layout_rows()` and `dims()` once all three rows are known closed (hot: lowering)
        self._layout: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]] | None = None
        self._dims: tuple[int, ...] | None = None
        self.is_param = is_param
        self.is_terminal = is_terminal or is_param
        #: where a parameter was created (given by the caller): closing errors point there
        self.span = span

    @staticmethod
    def make(label: str, *, batch_dims: DimsArg = None, output_dims: DimsArg = None,
             input_dims: DimsArg = None, is_param: bool = False, is_terminal: bool = False,
             solver: Solver | None = None, span: Span | None = None) -> Shape:
        s = solver or Solver()
        return Shape(s, label, _row_of(s, batch_dims), _row_of(s, output_dims),
                     _row_of(s, input_dims), is_param=is_param, is_terminal=is_terminal,
                     span=span)

    @property
    def solver(self) -> Solver:
        """The solver of this shape's component (it changes when components merge)."""
        self._solver = self._solver.find()
        return self._solver

    def raw_rows(self) -> tuple[Row, Row, Row]:
        return self._rows

    def row(self, kind: Kind) -> Row:
        """The row of this kind as a term (for building constraints)."""
        return self._rows[0 if kind is Kind.BATCH else 1 if kind is Kind.OUTPUT else 2]

    def rows_now(self) -> tuple[Row, Row, Row]:
        return tuple(self.solver.subst_row(r) for r in self._rows)  # type: ignore[return-value]

    def is_closed(self) -> bool:
        return all(r.var is None and all(dim_size(d) is not None for d in r.dims)
                   for r in self.rows_now())

    def close(self) -> None:
        """Close this shape now (see `Solver.close`)."""
        if not self.is_closed():
            self.solver.close([self])

    def _ints(self, ix: int) -> tuple[int, ...]:
        known = self._closed[ix]
        if known is not None:
            return known
        solver = self.solver
        r = solver.subst_row(self._rows[ix])
        sizes = [dim_size(d) for d in r.dims]
        if r.var is not None or any(n is None for n in sizes):
            kind = ("batch", "output", "input")[ix]
            raise ShapeError(f"the {kind} dims of '{self.label}' are not inferred yet (shape "
                             f"so far: {self.describe()}); call oc.infer_shapes(tensor) first "
                             "(eval and compile do it); reading a shape never closes it",
                             user_span())
        out = tuple(int(n) for n in sizes)  # type: ignore[arg-type]
        if not solver.in_transaction():  # a failing one may still undo the bindings read
            self._closed[ix] = out
        return out

    @property
    def batch(self) -> tuple[int, ...]:
        """The batch dims once inferred (`oc.infer_shapes`, eval, compile); a ShapeError
        while the row is still open: reading never closes a shape (that would freeze a
        parameter before its uses are known)."""
        return self._ints(0)

    @property
    def output(self) -> tuple[int, ...]:
        """The output dims once inferred; a ShapeError while open (see `batch`)."""
        return self._ints(1)

    @property
    def input(self) -> tuple[int, ...]:
        """The input dims once inferred; a ShapeError while open (see `batch`)."""
        return self._ints(2)

    def layout_rows(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The batch, output and input dims (closed shapes only; see `batch`)."""
        got = self._layout
        if got is None:
            got = (self._ints(0), self._ints(1), self._ints(2))
            if None not in self._closed:  # read outside a transaction: they never change
                self._layout = got
        return got

    def dims(self) -> tuple[int, ...]:
        """All dims in memory layout order: batch, output, input (closed shapes only)."""
        got = self._dims
        if got is None:
            b, o, i = self.layout_rows()
            got = b + o + i
            if self._layout is not None:
                self._dims = got
        return got

    def labels(self) -> tuple[str | None, ...]:
        """Basis labels in layout order (closed shapes only)."""
        self.close()
        return tuple(d.label if isinstance(d, Dim) else None
                     for r in self.rows_now() for d in r.dims)

    def describe(self) -> str:
        b, o, i = self.rows_now()
        out, inp, bat = show_row(o), show_row(i), show_row(b)
        txt = f"{inp}->{out}" if inp else out
        return f"{bat}|{txt}" if bat else txt

    def __str__(self) -> str:
        """OCANNL notation of the shape as inferred so far ("2|3->4"). Printing never closes:
        an open shape shows its variables (`?i3` a dim, `..r5..` a row of unknown length)."""
        return self.describe()

    def __repr__(self) -> str:
        return f"Shape({self.label}: {self.describe()})"


def join_shapes(*shapes: Shape) -> Solver:
    """Merge the inference components of these shapes; returns their one solver.

    Example: ``join_shapes(a.shape, b.shape).add([RowEq(...)])``.
    """
    first, *rest = shapes
    return first.solver.join(*(s.solver for s in rest))
