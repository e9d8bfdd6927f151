"""A plain set (`v[...] = v1 * v2`, `=:`) over an iteration space that reduces (issue 23 item
5) kept the last value written; it is a located ShapeError naming the reduced label. And a
mistyped `=>` in a logic spec (issue 23 item 10) says that `=>` was expected.

Oracles: NumPy (matmul, outer products) and the error's class, message and location.
"""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.infer.spec_parser import parse_spec
from ocannl_ast.tensor.builders import accum, prim

A = np.array([[1.0, 2.0], [3.0, 4.0]])
B = np.array([[5.0, 6.0], [7.0, 8.0]])
HERE = "test_plain_set_reduction.py"


@oc.cd
def _mm_set(v, v1, v2, projections):
    v[...] = v1 * v2  # wrong: no reducer over k


@oc.cd
def _mm_sum(v, v1, v2, projections):
    v[...] = sum(v1 * v2)


@oc.cd
def _scaled_first(v, v1, v2, projections):
    v[...] = 2.0 * v1


def test_plain_set_over_a_reduced_label_is_a_located_error() -> None:
    mm = oc.binary_op(_mm_set, None, logic="ik;kj=>ij")
    with pytest.raises(oc.ShapeError) as info:
        oc.eval(mm(oc.ndarray(A), oc.ndarray(B)))
    msg = str(info.value)
    assert "'k'" in msg and "sum(...)" in msg and "=:+" in msg, msg
    assert HERE in msg and info.value.span is not None
    assert info.value.span.file.endswith(HERE)


def test_sum_gives_the_matmul() -> None:
    mm = oc.binary_op(_mm_sum, None, logic="ik;kj=>ij")
    got = oc.eval(mm(oc.ndarray(A), oc.ndarray(B)), precision="float64")
    np.testing.assert_allclose(got, A @ B, rtol=1e-12)


def test_the_reduced_label_is_named_among_kept_ones() -> None:
    f = oc.binary_op(_mm_set, None, logic="bik;bkj=>bij")
    x, y = np.ones((2, 2, 3)), np.ones((2, 3, 2))
    with pytest.raises(oc.ShapeError) as info:
        oc.eval(f(oc.ndarray(x), oc.ndarray(y)))
    msg = str(info.value)
    assert "over 'k' (size 3)" in msg, msg


def test_compose_logic_names_the_axis() -> None:
    compose = oc.binary_op(_mm_set, None, logic="@")
    w = oc.ndarray(A, input_axes=1, label="w")
    x = oc.ndarray(np.array([1.0, -1.0]), label="x")
    with pytest.raises(oc.ShapeError) as info:
        oc.eval(compose(w, x))
    msg = str(info.value)
    assert "input axis 0 of 'w'" in msg and HERE in msg, msg


def test_extent_one_reduction_is_fine() -> None:
    # k has size 1: one write per cell, the outer product
    mm = oc.binary_op(_mm_set, None, logic="ik;kj=>ij")
    a, b = np.array([[1.0], [2.0]]), np.array([[3.0, 4.0, 5.0]])
    got = oc.eval(mm(oc.ndarray(a), oc.ndarray(b)), precision="float64")
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)


def test_broadcast_write_is_fine() -> None:
    outer = oc.binary_op(_mm_set, None, logic="i;j=>ij")
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    got = oc.eval(outer(oc.ndarray(a), oc.ndarray(b)), precision="float64")
    np.testing.assert_allclose(got, np.outer(a, b), rtol=1e-12)


def test_iterations_writing_the_same_value_are_fine() -> None:
    # j is iterated but the value written does not depend on it
    f = oc.binary_op(_scaled_first, None, logic="i;j=>i")
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0, 5.0])
    got = oc.eval(f(oc.ndarray(a), oc.ndarray(b)), precision="float64")
    np.testing.assert_allclose(got, 2.0 * a, rtol=1e-12)


@oc.cd
def _compose_set(t, a, b):
    t[...] = a @ b  # wrong: `=:` over compose's summed axis


def test_cd_compose_without_sum_is_a_located_error() -> None:
    t = oc.node("t")
    w = oc.ndarray(A, input_axes=1, label="w")
    with pytest.raises(oc.ShapeError) as info:
        oc.Context().compile([_compose_set(t, w, oc.ndarray(np.array([1.0, -1.0])))])
    msg = str(info.value)
    assert "input axis 0 of 'w'" in msg and "t[...] = a @ b" in msg, msg


def test_standalone_assignment_names_the_kernel_label() -> None:
    x, w = oc.ndarray(np.arange(5.0)), oc.ndarray(np.array([1.0, -1.0, 2.0]))
    code = accum(oc.node("out"), "=:", prim("mul", x, w), logic="o+k; k => o")
    with pytest.raises(oc.ShapeError) as info:
        oc.Context().compile([code])
    msg = str(info.value)
    assert "over 'k' (size 3)" in msg and HERE in msg, msg


def test_standalone_conv_with_a_reducer_is_fine() -> None:
    x, w = np.arange(5.0), np.array([1.0, -1.0, 2.0])
    out = oc.node("out")
    ctx = oc.Context(precision="float64")
    ctx.compile([accum(out, "=:@^", prim("mul", oc.ndarray(x), oc.ndarray(w)),
                       logic="o+k; k => o")])()
    want = np.array([max(x[o:o + 3] * w) for o in range(3)])
    np.testing.assert_allclose(ctx.get(out), want, rtol=1e-12)


# ---- a mistyped `=>` ------------------------------------------------------------------------

def test_einsum_spec_missing_the_arrow_says_so() -> None:
    with pytest.raises(oc.SpecError) as info:
        oc.einsum("ik;kj=ij", oc.ndarray(A), oc.ndarray(B))
    msg = str(info.value)
    assert "expected '=>'" in msg and "kernel" not in msg and "'+'" not in msg, msg
    assert info.value.col == 5 and HERE in msg


@oc.cd
def _mm_logic_typo(t, a, b):
    t[...] = sum(a * b, logic="ik;kj=ij")


def test_cd_logic_missing_the_arrow_says_so() -> None:
    with pytest.raises(oc.SpecError) as info:
        _mm_logic_typo(oc.node("t"), oc.ndarray(A), oc.ndarray(B))
    msg = str(info.value)
    assert "expected '=>'" in msg and info.value.col == 5 and HERE in msg, msg


def test_binary_op_logic_missing_the_arrow_says_so() -> None:
    with pytest.raises(oc.SpecError) as info:
        oc.binary_op(_mm_sum, None, logic="ik;kj=ij")
    msg = str(info.value)
    assert "expected '=>'" in msg and HERE in msg, msg


@pytest.mark.parametrize("spec", ["ik;kj=ij", "i = j", "o=k;k=o"])
def test_parse_spec_expects_the_arrow(spec: str) -> None:
    with pytest.raises(oc.SpecError) as info:
        parse_spec(spec)
    assert "expected '=>'" in info.value.message and info.value.col == spec.index("=")


def test_padded_kernel_still_parses() -> None:
    assert parse_spec("o=+k; k => o").result.output is not None
