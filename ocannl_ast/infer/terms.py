"""Shape terms (seed 002): dims, dim variables, affine dims, rows with row variables.

Input: built by `infer.logic` (reading `infer.relations`) from tensor shapes and einsum
specs. Output: the terms the solver (`infer.solver`) unifies, bounds and closes. All terms
are immutable.
"""

from __future__ import annotations

import enum
from typing import assert_never

from ..records import record


@record
class Dim:
    """A known dimension: a size and an optional basis label (e.g. 3 labelled "rgb")."""

    size: int  #: number of positions (>= 0)
    label: str | None = None  #: basis label; axes that meet must agree on it


@record
class DimVar:
    """An unknown dimension."""

    id: int  #: unique in its solver
    name: str | None = None  #: spec label or role, for messages only


@record
class ConvPart:
    """Kernel part of an affine dim: `dilation * kernel`, valid or padded mode (seed 001)."""

    dilation: int
    kernel: DimTerm
    use_padding: bool


@record
class AffineDim:
    """An input axis indexed by `stride * over + offset` (+ a kernel): size derives from over.

    Sizes: pure stride or padded, `stride * over` (the offset is a phase, `< stride`); valid
    conv, `stride * (over - 1) + offset + span` with `span = 1 + (kernel - 1) * dilation`:
    the largest index read, `stride * (over - 1) + offset + dilation * (kernel - 1)`, is the
    last position of the axis, so no index ever leaves it.
    """

    stride: int  #: >= 1
    over: DimTerm  #: the output-position dimension
    offset: int  #: stride offset; never affects the size
    conv: ConvPart | None = None


DimTerm = Dim | DimVar | AffineDim


@record
class RowVar:
    """An unknown stretch of axes (any number, each unknown)."""

    id: int


@record
class Row:
    """`beg ++ var ++ dims`; without a row variable all axes are in `dims` (beg empty)."""

    beg: tuple[DimTerm, ...]  #: axes before the row variable
    var: RowVar | None  #: None for a closed row
    dims: tuple[DimTerm, ...]  #: axes after the row variable

    @staticmethod
    def closed(dims: tuple[DimTerm, ...] | list[DimTerm]) -> Row:
        """A row with exactly these axes. Example: ``Row.closed((Dim(2), Dim(3)))``."""
        return Row((), None, tuple(dims))

    @staticmethod
    def open(var: RowVar, beg: tuple[DimTerm, ...] = (), dims: tuple[DimTerm, ...] = ()) -> Row:
        """A row with a row variable. Example: ``Row.open(RowVar(0))``."""
        return Row(tuple(beg), var, tuple(dims))

    @property
    def known_len(self) -> int:
        return len(self.beg) + len(self.dims)


class Kind(enum.Enum):
    """The three rows of a shape; memory layout is batch, output, input."""

    BATCH = "batch"
    OUTPUT = "output"
    INPUT = "input"


def dim_size(d: DimTerm) -> int | None:
    """The size of a dim whose parts are known, else None. Example: ``dim_size(Dim(3)) == 3``."""
    match d:
        case Dim(size=s):
            return s
        case DimVar():
            return None
        case AffineDim(stride=st, over=over, offset=off, conv=conv):
            o = dim_size(over)
            if o is None:
                return None
            if conv is None or conv.use_padding:
                return st * o
            k = dim_size(conv.kernel)
            if k is None:
                return None
            return st * (o - 1) + off + kernel_span(k, conv.dilation) if o > 0 else 0
        case _:
            assert_never(d)


def kernel_span(kernel: int, dilation: int) -> int:
    """Input positions a dilated kernel covers: `1 + (kernel - 1) * dilation` (an empty
    kernel reads nothing; it counts as one position so sizes stay positive)."""
    return 1 + (kernel - 1) * dilation if kernel > 0 else 1


def show_dim(d: DimTerm) -> str:
    """Dim in OCANNL-like notation: `3`, `rgb=3`, `?i`, `2*?o+1`."""
    match d:
        case Dim(size=s, label=lbl):
            return f"{lbl}={s}" if lbl else str(s)
        case DimVar(id=i, name=n):
            return f"?{n or ''}{i}"
        case AffineDim(stride=st, over=o, offset=off, conv=conv):
            txt = f"{st}*{show_dim(o)}"
            if conv is not None:
                sep = "=+" if conv.use_padding else "<+"
                txt += f"{sep}{conv.dilation}*{show_dim(conv.kernel)}"
            return txt + (f"+{off}" if off else "")
        case _:
            assert_never(d)


def show_row(r: Row) -> str:
    parts = [show_dim(d) for d in r.beg]
    if r.var is not None:
        parts.append(f"..r{r.var.id}..")
    parts.extend(show_dim(d) for d in r.dims)
    return ",".join(parts)


def dim_vars(d: DimTerm, out: set[tuple[str, int]]) -> None:
    """Add the variables of `d` to `out` as ("d", id)."""
    match d:
        case Dim():
            pass
        case DimVar(id=i):
            out.add(("d", i))
        case AffineDim(over=over, conv=conv):
            dim_vars(over, out)
            if conv is not None:
                dim_vars(conv.kernel, out)
        case _:
            assert_never(d)


def row_vars(r: Row, out: set[tuple[str, int]]) -> None:
    """Add the variables of `r` to `out`: ("r", id) for its row variable, dims as ("d", id)."""
    if r.var is not None:
        out.add(("r", r.var.id))
    for part in (r.beg, r.dims):
        for d in part:
            if type(d) is not Dim:  # (a known size has none: no call)
                dim_vars(d, out)
