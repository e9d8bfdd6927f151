"""Stacking and block literals (seed 004) from the user's side: `oc.stack` along each axis
kind, `oc.block_literal` and block literals in @op bodies, shape mismatches, gradients.

Oracles: np.stack / nested np.array of the tensors' values; float64 central finite
differences for gradients (the `check` helper of test_concat).
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from tensor.test_concat import check, r

import ocannl_ast as oc

# ---- oc.stack along each axis kind ----------------------------------------------------------

def test_stack_output_of_vectors() -> None:
    check(lambda a, b, c: oc.stack([a, b, c]), [r(2), r(2), r(2)],
          lambda a, b, c: np.stack([a, b, c]))


def test_stack_output_of_matrices_with_inputs() -> None:
    """The new output axis leads the output row; the input row is carried."""
    check(lambda a, b: oc.stack([a, b]), [r(3, 2), r(3, 2)], lambda a, b: np.stack([a, b]),
          inputs=[1, 1])


def test_stack_input_axis_leads_the_input_row() -> None:
    # layout (output, input): the stack index is the first input axis, after the outputs
    check(lambda a, b, c: oc.stack([a, b, c], "input"), [r(2), r(2), r(2)],
          lambda a, b, c: np.stack([a, b, c], axis=-1))
    check(lambda a, b: oc.stack((a, b), axis_kind="input"), [r(2, 3), r(2, 3)],
          lambda a, b: np.stack([a, b], axis=1), inputs=[1, 1])


def test_stack_batch_axis_leads_the_batch_row() -> None:
    check(lambda a, b: oc.stack([a, b], "batch"), [r(4), r(4)], lambda a, b: np.stack([a, b]))
    check(lambda a, b: oc.stack([a, b], "batch"), [r(2, 3), r(2, 3)],
          lambda a, b: np.stack([a, b]), batch=[1, 1])


def test_stack_of_scalars_and_of_one() -> None:
    check(lambda a, b, c: oc.stack([a, b, c]), [r(), r(), r()], lambda a, b, c: np.stack([a, b, c]))
    check(lambda a: oc.stack([a]), [r(3)], lambda a: np.stack([a]))


def test_stack_the_same_tensor_twice_sums_its_gradients() -> None:
    check(lambda a: oc.stack([a, a * 2.0, a]), [r(2)], lambda a: np.stack([a, 2 * a, a]))


def test_stack_shapes_inferred_later() -> None:
    """A component's shape comes from context after the stack is built."""
    def f(a: Any, b: Any) -> Any:
        s = oc.stack([a * 1.0, b])
        return s + oc.ndarray(np.ones((2, 3)))
    check(f, [r(3), r(3)], lambda a, b: np.stack([a, b]) + 1.0)


def test_stack_of_stacks_and_into_contractions() -> None:
    def f(a: Any, b: Any, c: Any, d: Any) -> Any:
        m = oc.stack([oc.stack([a, b]), oc.stack([c, d])])
        return oc.einsum("ijk;k=>ij", m, a)
    check(f, [r(3), r(3), r(3), r(3)],
          lambda a, b, c, d: np.array([[a, b], [c, d]]) @ a)


def test_stack_value_matches_np_stack_without_grad() -> None:
    xs = [RNG_A.standard_normal((2, 3)) for _ in range(4)]
    ts = [oc.ndarray(x) for x in xs]
    np.testing.assert_allclose(oc.eval(oc.stack(ts), precision="float64"), np.stack(xs))


RNG_A = np.random.default_rng(11)


# ---- errors ---------------------------------------------------------------------------------

def _line_of(marker: str) -> int:
    src, start = inspect.getsourcelines(_mismatch)
    return start + next(i for i, line in enumerate(src) if marker in line)


def _mismatch() -> None:
    oc.stack([oc.ndarray([1.0, 2.0]), oc.ndarray([1.0, 2.0, 3.0])])  # MISMATCH


def test_stack_different_shapes_is_a_located_shape_error() -> None:
    with pytest.raises(oc.ShapeError) as e:
        _mismatch()
    assert f"test_stack.py:{_line_of('MISMATCH')}" in str(e.value)


def test_stack_different_ranks_and_kinds_are_shape_errors() -> None:
    with pytest.raises(oc.ShapeError):
        oc.stack([oc.ndarray([1.0, 2.0]), oc.ndarray([[1.0, 2.0]])])
    with pytest.raises(oc.ShapeError):
        oc.stack([oc.ndarray([1.0, 2.0]), oc.ndarray([(1.0, 2.0)])])
    with pytest.raises(oc.ShapeError):
        oc.block_literal([oc.ndarray([1.0, 2.0]), 3.0])  # a scalar next to a vector


def test_stack_mismatch_found_later_is_located() -> None:
    """Components of unknown shape: the mismatch surfaces where context fixes the second."""
    p, q = oc.param("p"), oc.param("q")
    s = oc.stack([p, q])
    p2 = p + oc.ndarray([1.0, 2.0])
    with pytest.raises(oc.ShapeError) as e:
        q2 = q + oc.ndarray([1.0, 2.0, 3.0])
        oc.eval(s + p2 + q2)
    assert "test_stack.py" in str(e.value)


def test_stack_bad_arguments() -> None:
    x = oc.ndarray([1.0])
    with pytest.raises(oc.OcannlError):
        oc.stack([])
    with pytest.raises(oc.OcannlError):
        oc.stack(x)  # type: ignore[arg-type]
    with pytest.raises(oc.OcannlError):
        oc.stack([x, x], axis_kind="rows")


# ---- block literals -------------------------------------------------------------------------

def test_block_literal_nested_matches_np_array() -> None:
    check(lambda a, b, c, d: oc.block_literal([[a, b], [c, d]]), [r(2)] * 4,
          lambda a, b, c, d: np.array([[a, b], [c, d]]))


def test_block_literal_tuple_is_an_input_axis() -> None:
    # [(a, b), (c, d)]: output axis of 2, then the components' outputs, then input axis 2
    check(lambda a, b, c, d: oc.block_literal([(a, b), (c, d)]), [r(3)] * 4,
          lambda a, b, c, d: np.array([[a, b], [c, d]]).transpose(0, 2, 1))


def test_block_literal_batch_level() -> None:
    check(lambda a, b: oc.block_literal(oc.batch([a, b])), [r(2), r(2)],
          lambda a, b: np.stack([a, b]))


def test_block_literal_mixes_numbers_with_scalar_tensors() -> None:
    check(lambda a, b: oc.block_literal([[a, 2.0], [-1.0, b]]), [r(), r()],
          lambda a, b: np.array([[a, 2.0], [-1.0, b]]))


def test_block_literal_of_numbers_is_a_literal() -> None:
    t = oc.block_literal([(1, 2), (3, 4)])
    oc.infer_shapes(t)
    assert (tuple(t.shape.output), tuple(t.shape.input)) == ((2,), (2,))
    np.testing.assert_allclose(oc.eval(t), [[1, 2], [3, 4]])


def test_ndarray_stays_data_only() -> None:
    with pytest.raises(oc.OcannlError):
        oc.ndarray([oc.ndarray([1.0]), oc.ndarray([2.0])])


# ---- block literals in @op bodies -----------------------------------------------------------

@oc.op
def _rows(a, b):
    return [a, b]


@oc.op
def _rotation_like(c, s):
    return [(c, -s), (s, c)] * 1.0


@oc.op
def _mixed(a, b):
    return [[a, b], [b * 2.0, a]] + 1.0


@oc.op
def _batched(a, b):
    return batch([a, b])  # noqa: F821  (the dialect's batch(...))


def test_op_body_list_literal_stacks() -> None:
    check(lambda a, b: _rows(a, b), [r(3), r(3)], lambda a, b: np.stack([a, b]))


def test_op_body_tuple_literal_of_scalars() -> None:
    check(lambda c, s: _rotation_like(c, s), [r(), r()],
          lambda c, s: np.array([[c, -s], [s, c]]))


def test_op_body_nested_literal_in_an_expression() -> None:
    check(lambda a, b: _mixed(a, b), [r(2), r(2)],
          lambda a, b: np.array([[a, b], [b * 2.0, a]]) + 1.0)


def test_op_body_batch_literal() -> None:
    check(lambda a, b: _batched(a, b), [r(2), r(2)], lambda a, b: np.stack([a, b]))


def test_op_body_numeric_literal_unchanged() -> None:
    @oc.op
    def f(x):
        return x * [1.0, 2.0]
    np.testing.assert_allclose(oc.eval(f(oc.ndarray([3.0, 4.0]))), [3.0, 8.0])


def test_op_returning_a_tuple_still_returns_several_results() -> None:
    @oc.op
    def two(a, b):
        return a * 2.0, (a, b)

    x, y = oc.ndarray([1.0, 2.0]), oc.ndarray([3.0, 4.0])
    first, pair = two(x, y)
    np.testing.assert_allclose(oc.eval(first), [2.0, 4.0])
    # a tuple display nested in the return value is a block literal (input axis)
    np.testing.assert_allclose(oc.eval(pair), [[1.0, 3.0], [2.0, 4.0]])

    @oc.op
    def pair_of(a, b):
        return (a, b)
    assert isinstance(pair_of(x, y), tuple)
