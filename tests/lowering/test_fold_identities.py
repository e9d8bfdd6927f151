"""`fold_constants`' exact identities: x * 1, 1 * x, x + -0.0, -0.0 + x and x - 0.0 are x
bit for bit, so a folded constant drops them; x + 0.0 (which turns -0.0 into +0.0),
0.0 - x, x * -1 and x / 1 stay. Checked against IEEE arithmetic on NumPy's float32 and
float64 over special values."""

from __future__ import annotations

import numpy as np
import pytest

from ocannl_ast.lowering.fold_constants import identity_operand
from ocannl_ast.lowering.loop_ir import Binary, Const, GetLocal
from ocannl_ast.vocabulary import BinOp

X = GetLocal("x")
SPECIALS = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, 1e-320]


@pytest.mark.parametrize(("op", "lhs", "rhs"), [
    (BinOp.MUL, X, Const(1.0)), (BinOp.MUL, Const(1.0), X),
    (BinOp.ADD, X, Const(-0.0)), (BinOp.ADD, Const(-0.0), X), (BinOp.SUB, X, Const(0.0))])
def test_exact_identities_fold_to_x(op: BinOp, lhs: object, rhs: object) -> None:
    assert identity_operand(Binary(op, lhs, rhs)) is X  # type: ignore[arg-type]
    c = rhs.value if isinstance(rhs, Const) else lhs.value  # type: ignore[union-attr]
    fn = {BinOp.MUL: np.multiply, BinOp.ADD: np.add, BinOp.SUB: np.subtract}[op]
    for dtype in (np.float32, np.float64):
        xs = np.array(SPECIALS, dtype=dtype)
        k = dtype(c)
        got = fn(xs, k) if isinstance(rhs, Const) else fn(k, xs)
        assert got.tobytes() == xs.tobytes() or np.isnan(xs).any() and np.array_equal(
            got, xs, equal_nan=True) and np.array_equal(np.signbit(got), np.signbit(xs))


@pytest.mark.parametrize(("op", "lhs", "rhs"), [
    (BinOp.ADD, X, Const(0.0)), (BinOp.ADD, Const(0.0), X), (BinOp.SUB, Const(0.0), X),
    (BinOp.SUB, X, Const(-0.0)), (BinOp.MUL, X, Const(-1.0)), (BinOp.DIV, X, Const(1.0)),
    (BinOp.MUL, X, Const(2.0)), (BinOp.MAX, X, Const(-np.inf))])
def test_other_operations_stay(op: BinOp, lhs: object, rhs: object) -> None:
    assert identity_operand(Binary(op, lhs, rhs)) is None  # type: ignore[arg-type]


def test_x_plus_zero_is_not_an_identity_for_negative_zero() -> None:
    """Why x + 0.0 stays: IEEE gives +0.0 for -0.0 + 0.0."""
    assert not np.signbit(np.float32(-0.0) + np.float32(0.0))
    assert np.signbit(np.float32(-0.0) + np.float32(-0.0))
    assert np.signbit(np.float32(-0.0) - np.float32(0.0))
