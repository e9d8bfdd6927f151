"""The discardable-variable test of seed 004 (a quantifier alternation computed up front
from the spec) and what closing does with it: discardable components close to 0, the
others to 1. The seed's worked cases are the table."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.infer.concat import discardable
from ocannl_ast.infer.spec_parser import parse_spec

# spec -> for each concatenated axis in order (result first, then operands), its verdicts
TABLE = [
    ("a^b=>a", [(False, True)]),  # the suffix is sliced away: b may be empty
    ("a^b=>b", [(True, False)]),
    ("a^b=>a^b", [(False, False), (False, False)]),  # both carry through
    ("a;b=>a^b", [(False, False)]),  # each source needs its component
    ("a;b=>a^c", [(False, False)]),  # c is unconstrained, not redundant
    ("a;b=>a^b^c", [(False, False, True)]),  # c: a vestigial empty slot
    ("3^a=>a", [(True, False)]),  # skip three at the front
    ("a=>a^3", [(False, True)]),  # write all but the last three
    ("a^b^c=>b", [(True, False, True)]),  # the middle
    ("b=>a^b^c", [(True, False, True)]),
]


@pytest.mark.parametrize("spec,expected", TABLE, ids=[s for s, _ in TABLE])
def test_discardable_table(spec: str, expected: list[tuple[bool, ...]]) -> None:
    verdicts = discardable(parse_spec(spec))
    assert [verdicts[k] for k in sorted(verdicts, key=lambda k: (k[0], k[2]))] == expected


@pytest.mark.parametrize("spec,src,want", [
    ("a^b=>a", 5, 5),  # b closes to 0: the prefix is everything
    ("a^b=>b", 5, 5),
    ("3^a=>a", 5, 2),
    ("a^2=>a", 5, 3),
])
def test_closing_guesses_discardable_components_to_zero(spec: str, src: int, want: int) -> None:
    out = oc.concat(spec, oc.ndarray(np.arange(float(src))))
    oc.infer_shapes(out)
    assert tuple(out.shape.output) == (want,)


def test_source_naming_no_result_component_is_rejected_at_the_call() -> None:
    """`a; b => a^c`: c is not discardable (the verdict table above), but source 2 names no
    component of the result, so it would be live everywhere and overlap source 1: a
    located ShapeError at the call, not an overlap found at eval."""
    x, y = oc.ndarray([1.0, 2.0]), oc.ndarray([5.0])
    with pytest.raises(oc.ShapeError) as e:
        oc.concat("a;b=>a^c", x, y)  # HERE
    assert "source 2 names no component" in str(e.value)
    assert "test_concat_discardable.py" in str(e.value)
    for spec in ("a;b=>c^b", "a;b;c=>a^c"):
        with pytest.raises(oc.ShapeError):
            oc.concat(spec, *[oc.ndarray([1.0, 2.0])] * spec.count(";"), oc.ndarray([5.0]))
    # every source placed: fine (c the empty summand), and a single source may slice
    np.testing.assert_allclose(oc.eval(oc.concat("a;b=>a^b^c", x, y)), [1.0, 2.0, 5.0])
    np.testing.assert_allclose(oc.eval(oc.concat("a^b=>a", oc.ndarray([1.0, 2.0]))),
                               [1.0, 2.0])


def test_result_size_inferred_as_a_sum() -> None:
    out = oc.concat("a;b;c=>a^b^c", oc.ndarray([1.0]), oc.ndarray([2.0, 3.0]),
                    oc.ndarray([4.0, 5.0, 6.0]))
    oc.infer_shapes(out)
    assert tuple(out.shape.output) == (6,)
