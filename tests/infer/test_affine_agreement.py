"""Contradictory affine terms (seed 001: "two affine terms can be required to denote the same
index ... the solver defers such checks to the second stratum"): every affine term over a
label must denote its whole axis given that label's extent. Projection inference checks it
in its second stratum (a ShapeError, never a partial read); through the public API shape
inference already rejects these specs, at the user's line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.infer.projections import derive_projections
from ocannl_ast.infer.relations import Einsum
from ocannl_ast.infer.spec_parser import parse_spec


def dims(n: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    return ((), (n,), ())


#: (spec, result size, operand sizes): closed dims that projection inference must refuse
CONTRADICTORY = [
    ("2*o; 3*o => 0", 1, [6, 12]),  # o is 3 by the first term, 4 by the second
    ("2*o<+k; o; k => 0", 1, [10, 3, 3]),  # o is 3, so the input must be 7 positions
    ("2*o+1; o => o", 3, [8, 3]),  # striding with an offset: 2*3 positions, not 8
    ("o=+k; k => o", 4, [6, 3]),  # padded: the input has as many positions as o
    ("o; k => 2*o<+k", 3, [3, 2]),  # write form: the result must be 2*2 + 2 positions
]


@pytest.mark.parametrize(("spec", "res", "ops"), CONTRADICTORY)
def test_second_stratum_rejects_contradictory_affine_terms(spec: str, res: int,
                                                           ops: list[int]) -> None:
    with pytest.raises(oc.ShapeError, match="contradictory affine terms over 'o'"):
        derive_projections(Einsum(parse_spec(spec)), dims(res), [dims(n) for n in ops])


CONSISTENT = [
    ("2*o; 3*o => 0", 1, [6, 9], 3),
    ("2*o; 2*o+1 => o", 3, [6, 6], 3),
    ("2*o<+k; o; k => 0", 1, [7, 3, 3], 3),
    ("2*o<+k; 3*o<+j; k; j => 0", 1, [7, 8, 3, 2], 2),
    ("o=+k; k => o", 6, [6, 3], 6),
    ("o; k => 2*o<+k", 6, [3, 2], 3),
]


@pytest.mark.parametrize(("spec", "res", "ops", "o_extent"), CONSISTENT)
def test_consistent_affine_duplicates_still_derive(spec: str, res: int, ops: list[int],
                                                   o_extent: int) -> None:
    proj = derive_projections(Einsum(parse_spec(spec)), dims(res), [dims(n) for n in ops])
    assert o_extent in [n for _, n in proj.product]  # a loop over o with o's extent



@pytest.mark.parametrize(("spec", "arrays"), [
    ("2*o; 3*o => 0", [np.arange(6.0), np.arange(12.0)]),
    ("2*o<+k; o; k => 0", [np.arange(10.0), np.ones(3), np.ones(3)]),
    ("2*o+1; o => o", [np.arange(8.0), np.ones(3)]),
    ("2*o; 3*o => o", [np.arange(12.0)] * 2),
])
def test_public_api_contradictions_are_located_shape_errors(spec: str,
                                                            arrays: list[np.ndarray]) -> None:
    ops = [oc.ndarray(a) for a in arrays]
    line = inspect.currentframe().f_lineno + 2  # type: ignore[union-attr]
    with pytest.raises(oc.ShapeError) as info:
        oc.eval(oc.einsum(spec, *ops))
    assert info.value.span is not None
    assert (info.value.span.file, info.value.span.line) == (__file__, line), str(info.value)


def test_public_api_consistent_duplicates_match_numpy() -> None:
    x, y = np.arange(6.0), np.arange(9.0)
    got = oc.eval(oc.einsum("2*o; 3*o => 0", oc.ndarray(x), oc.ndarray(y)),
                  precision="float64")
    np.testing.assert_allclose(got, [sum(x[2 * o] * y[3 * o] for o in range(3))])
    same = oc.ndarray(x)  # one tensor read through two affine terms with different offsets
    got = oc.eval(oc.einsum("2*o; 2*o+1 => o", same, same), precision="float64")
    np.testing.assert_allclose(got, x[0::2] * x[1::2])
