"""Errors from decorated bodies and from plain calls point at the user's exact column:
the rewriter passes each statement's span to the builders (`span=`), plain calls use the
one frame-position lookup in errors.py. Each case names its line with a `# COL:` marker
and the text the caret must start at."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

with open(__file__, encoding="utf-8") as _f:
    _SRC = _f.read().splitlines()


def where(marker: str, text: str) -> tuple[int, int]:
    """(line, column) of `text` on the line ending with `# COL:marker`."""
    lines = [n for n, s in enumerate(_SRC, 1) if s.rstrip().endswith(f"# COL:{marker}")]
    assert len(lines) == 1, marker
    return lines[0], _SRC[lines[0] - 1].index(text)


def assert_at(err: oc.OcannlError, marker: str, text: str) -> None:
    line, col = where(marker, text)
    assert err.span is not None, str(err)
    assert (err.span.file, err.span.line, err.span.col) == (__file__, line, col), str(err)


@oc.cd
def _bad_logic(v, v1, projections):
    v[...] = v1 * 2.0; accum(v, "=:", v1, logic="ij=>ij)")  # noqa: E702, F821  # COL:logic


@oc.cd
def _rank_clash(v, v1, v2):
    v[...] = v1 + 1.0;  v[...] = v2 * 2.0  # noqa: E702  # COL:cd-shape


@oc.op
def _op_shape(x, y):
    z = x + 1.0
    return z  +  y  # COL:op-shape


@oc.op
def _op_named(x):
    y[i] = sum[j](x[i, j] * x[j, i])  # noqa: F821  # COL:op-named
    return y  # noqa: F821


def test_shape_error_in_an_op_body_points_at_the_operator_expression() -> None:
    with pytest.raises(oc.ShapeError) as info:
        _op_shape(oc.ndarray([1.0, 2.0]), oc.ndarray([1.0, 2.0, 3.0]))
    assert_at(info.value, "op-shape", "z  +  y")


def test_second_statement_on_a_line_gets_its_own_column() -> None:
    a = oc.ndarray([1.0, 2.0])
    b = oc.ndarray([[1.0, 2.0, 3.0]])
    with pytest.raises(oc.ShapeError) as info:
        oc.infer_shapes(oc.term("t", output_dims=[2]))
        _rank_clash(oc.node("v_clash", output_dims=[2]), a, b)
    assert_at(info.value, "cd-shape", "v[...] = v2")


def test_bad_logic_in_a_cd_body_points_at_its_statement() -> None:
    with pytest.raises(oc.SpecError) as info:
        oc.unary_op(_bad_logic, None)(oc.ndarray([1.0, 2.0]))
    assert_at(info.value, "logic", 'accum(v, "=:"')


def test_named_index_shape_error_points_at_its_statement() -> None:
    with pytest.raises(oc.ShapeError) as info:
        _op_named(oc.ndarray(np.ones((2, 3))))
    assert_at(info.value, "op-named", "y[i] = sum")


def test_mod_primitive_is_pinned_to_numpy_convention() -> None:
    # `mod_` used to be rejected at decoration (its sign convention was open); it is now
    # NumPy's np.mod: the result takes the divisor's sign
    a = np.array([-2.5, -1.0, 0.5, 3.25])
    b = np.array([1.5, -0.75, -2.0, 1.0])
    got = oc.eval(oc.mod(oc.ndarray(a), oc.ndarray(b)))
    np.testing.assert_allclose(got, np.mod(a, b), rtol=1e-6, atol=1e-6)


def test_plain_calls_point_at_the_call() -> None:
    with pytest.raises(oc.ShapeError) as info:
        _ = oc.ndarray([1.0, 2.0]) + oc.ndarray([1.0, 2.0, 3.0])  # COL:plain
    assert_at(info.value, "plain", "oc.ndarray([1.0, 2.0]) +")
    with pytest.raises(oc.SpecError) as info2:
        oc.einsum("ij;jk=>ik)", oc.ndarray([1.0]), oc.ndarray([1.0]))  # COL:plain-spec
    assert_at(info2.value, "plain-spec", "oc.einsum(")
    with pytest.raises(oc.SpecError) as info3:
        oc.unary_op(lambda v, v1, projections: None, None, logic="i=>i)")  # COL:plain-logic
    assert_at(info3.value, "plain-logic", "oc.unary_op(")


def test_library_dialect_functions_report_at_the_users_call() -> None:
    # built-in ops run the library's own @cd functions: their spans are not the user's
    with pytest.raises(oc.ShapeError) as info:
        _ = oc.relu(oc.ndarray([1.0, 2.0])) - oc.ndarray([[1.0, 2.0, 3.0]])  # COL:lib
    assert_at(info.value, "lib", "oc.relu(")
