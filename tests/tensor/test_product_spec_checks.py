"""Product specs that shape inference accepts but that gave silently surprising numbers
(found by a user-side check against NumPy): a result label no operand names (`ij=>ik`, a
typo: a size-1 axis, the meant label summed over) and a result axis concatenating
different operands' components under `oc.einsum` (`a;b=>a^b`: zeros). Both are located
SpecErrors; the one-operand `^` forms and `oc.concat` keep working."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

A = np.arange(6.0).reshape(2, 3)


@pytest.mark.parametrize("spec", ["ij=>ik", "row, col => row, cool", "i, j => i_", "i=>ij",
                                  "ij=>2*k+1"])
def test_a_result_label_no_operand_names_is_a_spec_error(spec: str) -> None:
    x = oc.ndarray(A) if spec != "i=>ij" else oc.ndarray(A[0])
    with pytest.raises(oc.SpecError, match="names no operand's axis") as e:
        oc.einsum(spec, x)
    assert "test_product_spec_checks.py" in str(e.value)
    with pytest.raises(oc.SpecError, match="einsum_max: the result's label"):
        oc.einsum_max(spec, x)


def test_result_labels_from_any_operand_or_window_are_fine() -> None:
    a, b = oc.ndarray(A), oc.ndarray(A.T)
    np.testing.assert_allclose(oc.eval(oc.einsum("ij;jk=>ik", a, b)), A @ A.T)
    np.testing.assert_allclose(oc.eval(oc.einsum("ij=>i_", a)), A.sum(1, keepdims=True))
    np.testing.assert_allclose(oc.eval(oc.einsum("i;j=>ij", oc.ndarray(A[0]), oc.ndarray(A[1]))),
                               np.outer(A[0], A[1]))
    x = oc.ndarray(np.arange(8.0))
    np.testing.assert_allclose(oc.eval(oc.einsum("2*o<+k => o", x, window={"k": 2})),
                               np.arange(8.0).reshape(4, 2).sum(1))


@pytest.mark.parametrize("spec,n", [("a;b=>a^b", 2), ("r,c;r,t=>r,c^t", 2)])
def test_einsum_concatenating_operands_points_to_concat(spec: str, n: int) -> None:
    ops = [oc.ndarray(np.ones((2, 2))), oc.ndarray(np.ones((2, 3)))] if "," in spec else \
        [oc.ndarray([1.0, 2.0, 3.0]), oc.ndarray([4.0, 5.0])]
    with pytest.raises(oc.SpecError, match="use oc.concat"):
        oc.einsum(spec, *ops[:n])
    assert oc.eval(oc.concat(spec, *ops[:n])).size == 5 * (2 if "," in spec else 1)


def test_one_operand_concat_forms_under_einsum_still_work() -> None:
    x = oc.ndarray([1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_allclose(oc.eval(oc.einsum("2^b^1=>b", x)), [3.0, 4.0])
    np.testing.assert_allclose(oc.eval(oc.einsum("b=>1^b^2", oc.ndarray([4.0, 5.0]))),
                               [0.0, 4.0, 5.0, 0.0, 0.0])
    y = oc.ndarray([2.0, 3.0])
    np.testing.assert_allclose(oc.eval(oc.einsum("b;b=>1^b^1", y, y)), [0.0, 4.0, 9.0, 0.0])
    np.testing.assert_allclose(oc.eval(oc.einsum("a^b;b=>b", oc.ndarray([1.0, 2.0, 3.0, 4.0]),
                                                 y)), [6.0, 12.0])
