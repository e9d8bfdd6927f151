"""The worked examples of seeds 000 (projections) and 002 (shapes), and the stride-only
affine of seed 001, run end to end through generated C (`oc.eval`) and checked against
NumPy. Expected values always come from NumPy, never from this library."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

RNG = np.random.default_rng(20240601)


def rand(*dims: int) -> np.ndarray:
    return RNG.standard_normal(dims)


def ev(t: oc.Tensor) -> np.ndarray:
    return oc.eval(t, precision="float64")


def close(got: np.ndarray, want: np.ndarray) -> None:
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# ---- seed 000, worked example 1: matrix multiplication -----------------------------------


def test_matmul_einsum() -> None:
    a, b = rand(2, 3), rand(3, 4)
    t = oc.einsum("ij;jk=>ik", oc.ndarray(a), oc.ndarray(b))
    assert t.shape.output == (2, 4)
    assert (t.shape.batch, t.shape.input) == ((), ())
    close(ev(t), a @ b)


def test_matmul_einsum_multichar() -> None:
    a, b = rand(3, 2), rand(2, 5)
    t = oc.einsum("row, k; k, col => row, col", oc.ndarray(a), oc.ndarray(b))
    close(ev(t), a @ b)


def test_matmul_compose_of_ndarrays_with_input_axes() -> None:
    a, b = rand(2, 3), rand(3, 4)
    # numpy layout is batch, output, input: a is "3->2", b is "4->3"
    ta = oc.ndarray(a, input_axes=1)
    tb = oc.ndarray(b, input_axes=1)
    assert str(ta.shape) == "3->2"
    t = ta @ tb
    oc.infer_shapes(t)  # reading sizes needs closed shapes; printing never closes
    assert (t.shape.input, t.shape.output) == ((4,), (2,))
    assert str(t.shape) == "4->2"
    close(ev(t), a @ b)


def test_compose_param_on_vector() -> None:
    w, x = rand(4, 3), rand(3)
    tw = oc.param("w", output_dims=[4], input_dims=[3], init=w)
    t = tw @ oc.ndarray(x)
    oc.infer_shapes(t)
    assert t.shape.output == (4,) and t.shape.input == ()
    close(ev(t), w @ x)


def test_compose_infers_param_input_dims_from_use() -> None:
    """`w`'s input row is only bounded below by the operand's outputs: it becomes (3,)."""
    x = rand(3)
    w = oc.param("w_in", output_dims=[2], init=0.5)
    t = w @ oc.ndarray(x)
    oc.infer_shapes(t)
    assert w.shape.input == (3,) and w.shape.output == (2,)
    close(ev(t), np.full((2, 3), 0.5) @ x)


def test_compose_broadcasts_batch_axes() -> None:
    w, x = rand(4, 3), rand(5, 3)
    tw = oc.param("w_b", output_dims=[4], input_dims=[3], init=w)
    tx = oc.ndarray(x, batch_axes=1)
    t = tw @ tx
    oc.infer_shapes(t)
    assert str(t.shape) == "5|4"
    close(ev(t), x @ w.T)


def test_matmul_chain_compose() -> None:
    a, b, c = rand(2, 3), rand(3, 4), rand(4, 5)
    t = oc.ndarray(a, input_axes=1) @ (oc.ndarray(b, input_axes=1) @ oc.ndarray(c, input_axes=1))
    close(ev(t), a @ b @ c)


# ---- seed 000, worked example 2: pointwise broadcast ---------------------------------


def test_scalar_times_matrix() -> None:
    m = rand(2, 3)
    t = oc.number(2.0) * oc.ndarray(m)
    oc.infer_shapes(t)
    assert t.shape.output == (2, 3)
    close(ev(t), 2.0 * m)


def test_python_number_lifts() -> None:
    m = rand(3, 2)
    close(ev(oc.ndarray(m) * 3.0 - 1.0), m * 3.0 - 1.0)
    close(ev(1.0 - oc.ndarray(m)), 1.0 - m)


def test_vector_broadcast_against_matrix() -> None:
    m, v = rand(2, 3), rand(3)
    t = oc.ndarray(m) + oc.ndarray(v)
    oc.infer_shapes(t)
    assert t.shape.output == (2, 3)
    close(ev(t), m + v)
    close(ev(oc.ndarray(v) * oc.ndarray(m)), v * m)


def test_size_one_axis_broadcasts() -> None:
    m, c = rand(2, 3), rand(2, 1)
    close(ev(oc.ndarray(m) + oc.ndarray(c)), m + c)
    r = rand(1, 3)
    close(ev(oc.ndarray(r) * oc.ndarray(m)), r * m)


def test_broadcast_input_and_batch_rows() -> None:
    x = rand(2, 3, 4)  # batch 2, output 3, input 4
    v = rand(4)  # input 4
    t = oc.ndarray(x, batch_axes=1, input_axes=1) + oc.ndarray(v.reshape(1, 4), input_axes=1)
    oc.infer_shapes(t)
    assert str(t.shape) == "2|4->3"
    close(ev(t), x + v)


# ---- seed 000, worked example 3: summing by a vector of ones ---------------------------


def test_sum_by_ones_compose_param_closes_upward() -> None:
    m = rand(2, 3)
    ones = oc.param("ones", init=1.0)
    t = oc.ndarray(m, input_axes=1) @ ones
    close(ev(t), m.sum(axis=1))
    # shape inference grew the ones vector to the length of the reduced axis
    assert ones.shape.output == (3,)
    assert ones.shape.input == () and ones.shape.batch == ()


def test_sum_by_ones_einsum() -> None:
    m = rand(4, 3)
    ones = oc.param("ones_e", init=1.0)
    t = oc.einsum("pq;q=>p", oc.ndarray(m), ones)
    close(ev(t), m.sum(axis=1))
    assert ones.shape.output == (3,)


def test_sum_by_ones_ndarray() -> None:
    m = rand(4, 3)
    t = oc.einsum("pq;q=>p", oc.ndarray(m), oc.ndarray(np.ones(3)))
    close(ev(t), m.sum(axis=1))


def test_reduction_without_ones() -> None:
    m = rand(4, 3)
    close(ev(oc.einsum("pq=>p", oc.ndarray(m))), m.sum(axis=1))
    close(ev(oc.einsum("pq=>q", oc.ndarray(m))), m.sum(axis=0))
    close(ev(oc.einsum("pq=>", oc.ndarray(m))), m.sum())


# ---- row variables: `...` and `..v..` move axes between rows ------------------------------


def test_row_variables_swap_input_and_output() -> None:
    x = rand(2, 3, 4)  # batch 2, output 3, input 4
    t = oc.einsum("...|i->o => ...|o->i", oc.ndarray(x, batch_axes=1, input_axes=1))
    assert str(t.shape) == "2|3->4"
    close(ev(t), x.transpose(0, 2, 1))


def test_ellipsis_is_one_row_variable_per_row_kind() -> None:
    """OCANNL: `...` in the batch, input and output rows are three different row
    variables, so `...|...->...` matches any shape and copies it unchanged."""
    x = rand(2, 3, 4)
    t = oc.einsum("...|...->... => ...|...->...", oc.ndarray(x, batch_axes=1, input_axes=1))
    assert str(t.shape) == "2|4->3"
    close(ev(t), x)


def test_ellipsis_rows_with_different_ranks() -> None:
    x = rand(2, 5, 3, 4)  # batch (2,), output (5, 3), input (4,)
    t = oc.einsum("...|...->... => ...|...->...", oc.ndarray(x, batch_axes=1, input_axes=1))
    close(ev(t), x)


def test_dropping_the_input_row_variable_sums_it() -> None:
    x = rand(2, 3, 4, 5)  # batch 2, output 3, input (4, 5)
    t = oc.einsum("...|...->... => ...|...", oc.ndarray(x, batch_axes=1, input_axes=2))
    assert str(t.shape) == "2|3"
    close(ev(t), x.sum(axis=(2, 3)))


def test_input_row_sums_into_output_only_result() -> None:
    m = rand(2, 3)  # 3->2
    t = oc.einsum("...->... => ...|...", oc.ndarray(m, input_axes=1))
    oc.infer_shapes(t)
    assert t.shape.output == (2,) and t.shape.batch == ()
    close(ev(t), m.sum(axis=1))


def test_named_row_variable_moves_batch_axes_to_output() -> None:
    x = rand(2, 3, 4)  # batch (2, 3), output (4,)
    t = oc.einsum("..b..|o => ..b.., o", oc.ndarray(x, batch_axes=2))
    assert t.shape.output == (2, 3, 4) and t.shape.batch == ()
    close(ev(t), x)


def test_ellipsis_with_trailing_label_reverses() -> None:
    x = rand(2, 3, 4)
    t = oc.einsum("...ij => ...ji", oc.ndarray(x))
    close(ev(t), x.transpose(0, 2, 1))


# ---- fixed indices: slices and embeddings ------------------------------------------------


@pytest.mark.parametrize("row", [0, 1, 2])
def test_fixed_index_reads_a_row(row: int) -> None:
    e = rand(3, 4)  # an embedding table: 3 entries of dimension 4
    t = oc.einsum(f"{row}d=>d", oc.ndarray(e))
    assert t.shape.output == (4,)
    close(ev(t), e[row])


def test_fixed_index_reads_a_column_multichar() -> None:
    m = rand(2, 3)
    close(ev(oc.einsum("i, 2 => i", oc.ndarray(m))), m[:, 2])


def test_fixed_index_reads_a_single_cell() -> None:
    m = rand(3, 4)
    close(ev(oc.einsum("1 2 => ", oc.ndarray(m))), m[1, 2])


def test_fixed_index_write_at_zero_is_a_size_one_axis() -> None:
    m = rand(2, 3)
    t = oc.einsum("ij=>i0", oc.ndarray(m))
    close(ev(t), m.sum(axis=1, keepdims=True))


def test_fixed_index_write_grows_the_axis_and_zero_fills() -> None:
    """OCANNL: a fixed index k needs at least k+1 positions; an otherwise undetermined
    result axis closes to exactly k+1, and the cells not written stay 0 (one-hot layout)."""
    v = rand(3)
    t = oc.einsum("i=>i1", oc.ndarray(v))
    want = np.zeros((3, 2))
    want[:, 1] = v
    close(ev(t), want)
    t2 = oc.einsum("i=>2i", oc.ndarray(v))
    want2 = np.zeros((3, 3))
    want2[2] = v
    close(ev(t2), want2)


def test_fixed_index_write_into_a_larger_known_axis() -> None:
    """One-hot: scatter a scalar into position 2 of a length-5 axis fixed by another
    operand (the sum of the one-hot and a zero vector of length 5)."""
    one_hot = oc.einsum("i=>2", oc.number(1.0)) + oc.ndarray(np.zeros(5))
    want = np.zeros(5)
    want[2] = 1.0
    close(ev(one_hot), want)


def test_fixed_index_out_of_range_is_a_shape_error() -> None:
    with pytest.raises(oc.ShapeError, match="fixed index 3"):
        ev(oc.einsum("3d=>d", oc.ndarray(rand(3, 4))))


# ---- diagonals and transposition -----------------------------------------------------------


def test_diagonal_read() -> None:
    s = rand(4, 4)
    close(ev(oc.einsum("ii=>i", oc.ndarray(s))), np.diagonal(s))


def test_trace() -> None:
    s = rand(3, 3)
    close(ev(oc.einsum("ii=>", oc.ndarray(s))), np.trace(s))


def test_diagonal_write_zero_fills_off_diagonal() -> None:
    v = rand(4)
    close(ev(oc.einsum("i=>ii", oc.ndarray(v))), np.diag(v))


def test_diagonal_of_a_3d_tensor() -> None:
    x = rand(3, 2, 3)
    close(ev(oc.einsum("iji=>ji", oc.ndarray(x))), np.einsum("iji->ji", x))


def test_transpose_einsum() -> None:
    m = rand(2, 3)
    t = oc.einsum("ij=>ji", oc.ndarray(m))
    assert t.shape.output == (3, 2)
    close(ev(t), m.T)


def test_transpose_swaps_input_and_output() -> None:
    m = rand(2, 3)  # 3->2
    t = oc.transpose(oc.ndarray(m, input_axes=1))
    oc.infer_shapes(t)
    assert str(t.shape) == "2->3"
    close(ev(t), m.T)


# ---- batch axes ------------------------------------------------------------------------------


def test_batch_einsum_swap() -> None:
    x = rand(2, 3, 4)
    t = oc.einsum("b|i->o => b|o->i", oc.ndarray(x, batch_axes=1, input_axes=1))
    close(ev(t), x.transpose(0, 2, 1))


def test_batch_einsum_sum_inputs() -> None:
    x = rand(2, 3, 4)
    t = oc.einsum("b|i->o => b|o", oc.ndarray(x, batch_axes=1, input_axes=1))
    assert str(t.shape) == "2|3"
    close(ev(t), x.sum(axis=2))


def test_batch_einsum_with_shared_weights() -> None:
    x, w = rand(5, 3), rand(4, 3)  # x: batch 5, output 3; w: input 3 -> output 4
    t = oc.einsum("b|i; i->o => b|o", oc.ndarray(x, batch_axes=1), oc.ndarray(w, input_axes=1))
    close(ev(t), x @ w.T)


def test_batched_matmul_einsum() -> None:
    a, b = rand(3, 2, 4), rand(3, 4, 5)
    t = oc.einsum("b|ij; b|jk => b|ik", oc.ndarray(a, batch_axes=1), oc.ndarray(b, batch_axes=1))
    close(ev(t), a @ b)


# ---- seed 001: stride-only affine indices --------------------------------------------------


def test_interleave_even_positions() -> None:
    x = rand(3)
    t = oc.einsum("..., i => ..., 2*i", oc.ndarray(x))
    want = np.zeros(6)
    want[0::2] = x
    close(ev(t), want)


def test_interleave_odd_positions() -> None:
    x = rand(3)
    t = oc.einsum("..., i => ..., 2*i + 1", oc.ndarray(x))
    want = np.zeros(6)
    want[1::2] = x
    close(ev(t), want)


def test_interleave_two_tensors() -> None:
    a, b = rand(2, 4), rand(2, 4)
    t = (oc.einsum("..., i => ..., 2*i", oc.ndarray(a))
         + oc.einsum("..., i => ..., 2*i + 1", oc.ndarray(b)))
    want = np.empty((2, 8))
    want[:, 0::2] = a
    want[:, 1::2] = b
    close(ev(t), want)


@pytest.mark.parametrize(("offset", "spec"), [(0, "..., 2*i => ..., i"),
                                              (1, "..., 2*i + 1 => ..., i")])
def test_interleave_inverses_extract(offset: int, spec: str) -> None:
    x = rand(3, 6)
    t = oc.einsum(spec, oc.ndarray(x))
    assert t.shape.output == (3, 3)
    close(ev(t), x[:, offset::2])


def test_stride_three() -> None:
    x = rand(9)
    close(ev(oc.einsum("3*i + 2 => i", oc.ndarray(x))), x[2::3])


# ---- seed 000, gradient section: slot views move the reduction ------------------------


def test_matmul_gradients_match_numpy() -> None:
    a, b = rand(2, 3), rand(3, 4)
    ta = oc.param("ga", init=a)
    tb = oc.param("gb", init=b)
    c = oc.einsum("ij;jk=>ik", ta, tb)
    g = rand(2, 4)
    loss = oc.einsum("ik;ik=>", c, oc.ndarray(g))
    val, (da, db) = oc.value_and_grad(loss, [ta, tb], precision="float64")
    np.testing.assert_allclose(val, np.sum((a @ b) * g), rtol=1e-10)
    close(da, g @ b.T)  # contracts k
    close(db, a.T @ g)  # contracts i


def test_compose_gradients_match_numpy() -> None:
    w, x = rand(4, 3), rand(5, 3)
    tw = oc.param("gw", output_dims=[4], input_dims=[3], init=w)
    y = tw @ oc.ndarray(x, batch_axes=1)
    loss = oc.einsum("b|o=>", y * y)
    val, (dw,) = oc.value_and_grad(loss, [tw], precision="float64")
    ref = x @ w.T
    np.testing.assert_allclose(val, np.sum(ref * ref), rtol=1e-10)
    close(dw, 2 * ref.T @ x)


def test_plain_assignment_erases_unwritten_cells() -> None:
    from ocannl_ast.tensor.builders import accum

    def op_asn(v: object, v1: object, projections: object) -> object:
        return accum(v, "=:", v1, projections=projections)

    diag_set = oc.unary_op(op_asn, None, logic="i=>ii", name="diag_set")
    x = rand(3)
    t = diag_set(oc.ndarray(x))
    ctx = oc.Context(precision="float64")
    routine = ctx.compile(t.forward)
    ctx.set(t, np.full((3, 3), 7.0))  # stale contents from an earlier use of the node
    routine()
    close(ctx.get(t), np.diag(x))
