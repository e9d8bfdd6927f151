"""Einsum spec AST: what `infer.spec_parser.parse_spec` produces from a spec string.

Input: a spec such as "...|i->o; ...|o->h => ...|i->h". Output: frozen dataclasses below,
consumed by shape inference (`infer.logic` (reading `infer.relations`)) and projection derivation.
"""

from __future__ import annotations

from ..records import record


@record
class Label:
    """An axis named by a label: a dimension variable shared by every use of the name."""

    name: str


@record
class FixedIndex:
    """An axis read or written at a fixed position (e.g. "0" or "2"); its size is free."""

    value: int


@record
class Wildcard:
    """"_": an axis matched with nothing else (its own dimension variable)."""


@record
class Conv:
    """The kernel part of an affine axis: `dilation*kernel` with valid or padded mode."""

    dilation: int  #: coefficient of the kernel label (>= 1)
    kernel: str  #: the kernel label
    use_padding: bool  #: "=+" padded; "<+" valid


@record
class Affine:
    """`stride*over + offset` or `stride*over<+dilation*kernel` / `=+` (seed 001)."""

    stride: int  #: coefficient of `over` (>= 1)
    over: str  #: the output-position label
    offset: int  #: constant term ("+c"); 0 <= offset < stride for pure striding
    conv: Conv | None  #: None for pure striding


@record
class Concat:
    """`a^b^3`: components, each a label or an integer-sized anonymous block (seed 004)."""

    components: tuple[Label | int, ...]


AxisSpec = Label | FixedIndex | Wildcard | Affine | Concat


@record
class RowSpec:
    """One row: leading axes, an optional row variable, trailing axes."""

    beg: tuple[AxisSpec, ...]  #: axes before the row variable (empty when var is None)
    var: str | None  #: "..." for the ellipsis, the name for `..name..`, None if closed
    end: tuple[AxisSpec, ...]  #: axes after the row variable (all axes when var is None)


@record
class ShapeSpec:
    """`batch|input->output`; a row that is not written is None (read as: no axes)."""

    batch: RowSpec | None
    input: RowSpec | None
    output: RowSpec


@record
class EinsumSpec:
    """`rhs1;rhs2;... => lhs` (the right-hand side is on the left, as in OCANNL)."""

    operands: tuple[ShapeSpec, ...]  #: one per operand, in order
    result: ShapeSpec
    text: str  #: the original spec string
