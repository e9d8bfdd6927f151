"""Checks of a product spec (`oc.einsum`, `oc.einsum_max`) that shape inference would
accept and that would give silently surprising numbers:

- a result label no operand names (`ij=>ik`, a typo of `ij=>ij`): it would close to a
  size-1 axis while the misspelled label is summed over (NumPy rejects it too);
- a result axis concatenating labels of different operands (`a;b=>a^b`): a product has
  no value where one operand's component is absent (zeros): that is `oc.concat`.

Input: the parsed spec, the operation's name. Output: SpecError at the user's line, or
nothing.
"""

from __future__ import annotations

from ...errors import SpecError, user_span
from ...infer.spec_ast import Affine, AxisSpec, Concat, EinsumSpec, Label, ShapeSpec


def _names(ax: AxisSpec) -> list[str]:
    match ax:
        case Label(name=n):
            return [n]
        case Concat(components=cs):
            return [c.name for c in cs if isinstance(c, Label)]
        case Affine(over=o, conv=conv):
            return [o] + ([conv.kernel] if conv is not None else [])
        case _:
            return []


def _axes(ss: ShapeSpec) -> list[AxisSpec]:
    return [ax for rs in (ss.batch, ss.output, ss.input) if rs is not None
            for ax in rs.beg + rs.end]


def _col(text: str, name: str) -> int:
    """The column of `name` in the result part of `text` (after `=>`)."""
    arrow = text.find("=>")
    pos = text.find(name, arrow + 2) if arrow >= 0 else text.rfind(name)
    return max(pos, 0)


def check_product_spec(fn: str, spec: EinsumSpec) -> None:
    """SpecError for a result-only label or a result concatenation across operands."""
    named = [{n for ax in _axes(ss) for n in _names(ax)} for ss in spec.operands]
    everywhere = set().union(*named) if named else set()
    for ax in _axes(spec.result):
        for n in _names(ax):
            if n not in everywhere:
                raise SpecError(f"{fn}: the result's label '{n}' names no operand's axis "
                                "(a typo?); a size-1 axis is written '_'", spec.text,
                                _col(spec.text, n), user_span())
        if isinstance(ax, Concat) and len(spec.operands) > 1:
            parts = set(_names(ax))
            if any(ns & parts and parts - ns for ns in named):
                raise SpecError(f"{fn}: a result axis concatenates components of different "
                                "operands, which a product cannot fill (it multiplies "
                                "them, giving 0): use oc.concat for a concatenation",
                                spec.text, _col(spec.text, min(parts)), user_span())
