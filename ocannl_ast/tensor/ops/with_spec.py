"""Pointwise operations under an einsum spec (issue 21 item 10): the same op_asn / grad_asn
as the plain pointwise op, with the spec's projections instead of broadcasting, so
`add(a, b, spec="i;j=>ij")` is an outer sum and `relu(x, spec="ij=>ji")` a transposing relu.
A pointwise op assigns each result cell once (`=:`): every label of an operand must name an
axis of the result (a label left out would be reduced, which is an einsum's job).

Input: an op's name, assignment functions, spec and operands. Output: a result Tensor.
"""

from __future__ import annotations

from typing import Any

from ...errors import SpecError, user_span
from ...infer.logic import Einsum, row_var_key
from ...infer.spec_ast import (
    Affine,
    AxisSpec,
    Concat,
    EinsumSpec,
    FixedIndex,
    Label,
    ShapeSpec,
    Wildcard,
)
from ...infer.spec_parser import parse_spec
from ...infer.terms import Kind
from .. import validate
from ..node import Tensor
from .base import Asn, apply


def parse_checked(fn: str, spec: Any, operands: tuple[Any, ...]) -> EinsumSpec:
    """The spec, parsed and checked against the operand count (a located SpecError)."""
    validate.spec_and_operands(fn, spec, operands)
    try:
        return parse_spec(spec)
    except SpecError as e:
        raise e.with_span(user_span()) from None


def _names(ss: ShapeSpec) -> tuple[set[str], set[str]]:
    """The labels and row variables a shape spec names (labels inside affine / concat axes
    included)."""
    labels: set[str] = set()
    rows: set[str] = set()
    for kind, rs in ((Kind.BATCH, ss.batch), (Kind.OUTPUT, ss.output), (Kind.INPUT, ss.input)):
        if rs is None:
            continue
        if rs.var is not None:
            rows.add(row_var_key(rs.var, kind))
        for ax in rs.beg + rs.end:
            labels |= _axis_labels(ax)
    return labels, rows


def _axis_labels(ax: AxisSpec) -> set[str]:
    match ax:
        case Label(name=n):
            return {n}
        case Affine(over=over, conv=conv):
            return {over} if conv is None else {over, conv.kernel}
        case Concat(components=cs):
            return {c.name for c in cs if isinstance(c, Label)}
        case FixedIndex() | Wildcard():
            return set()


def check_no_reduction(fn: str, spec: EinsumSpec) -> None:
    """A pointwise op under a spec writes each result cell once: an operand label or row
    variable missing from the result would be reduced over (a located SpecError)."""
    res_labels, res_rows = _names(spec.result)
    for k, ss in enumerate(spec.operands, start=1):
        labels, rows = _names(ss)
        missing = sorted((labels - res_labels) | (rows - res_rows))
        if missing:
            shown = [f"'...' ({m[3:]} row)" if m.startswith("...") and m.count(".") == 3
                     else f"'{m}'" for m in missing]
            name = "..." if missing[0].startswith("...") else missing[0]
            raise SpecError(
                f"{fn}: operand {k} names {', '.join(shown)}, which the result does not: a "
                "pointwise op with a spec permutes and broadcasts but never reduces; name it "
                "in the result, or use oc.einsum (sum) / oc.einsum_max",
                spec.text, max(spec.text.find(name), 0), user_span())


def apply_spec(name: str, spec: Any, op_asn: Asn, grad_asn: Asn | None,
               *operands: Any) -> Tensor:
    """Build the pointwise operation `name` with the projections of an einsum `spec`.

    Example: ``apply_spec("add", "i;j=>ij", _add_op, _add_grad, a, b)``.
    """
    parsed = parse_checked(name, spec, operands)
    check_no_reduction(name, parsed)
    return apply(name, Einsum(parsed), op_asn, grad_asn, *operands)
