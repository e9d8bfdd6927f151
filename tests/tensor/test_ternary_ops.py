"""Ternary operations (issue 21 item 9): `oc.fma(a, b, c)` is `a @ b + c` in one
accumulation (OCANNL's Compose_accumulate), `oc.where(cond, a, b, spec=...)` and
`oc.einsum3(spec, op, a, b, c)` line three operands up by an einsum spec. Values from
NumPy (and PyTorch where importable), gradients by float64 central differences."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc

RNG = np.random.default_rng(21)


def _r(*shape: int) -> np.ndarray:
    return RNG.normal(size=shape)


def _ev(t: oc.Tensor) -> np.ndarray:
    return oc.eval(t, precision="float64")


def _as_weight(p: oc.Tensor) -> oc.Tensor:
    """A param made from a 2-D array (two output axes) read as an `i -> o` weight."""
    return oc.einsum("oi => i->o", p)


# ---- fma -------------------------------------------------------------------------------

def test_fma_is_matmul_plus_bias() -> None:
    w, x, b = _r(4, 3), _r(5, 3), _r(4)
    y = oc.fma(oc.ndarray(w, input_axes=1), oc.ndarray(x, batch_axes=1), oc.ndarray(b))
    oc.testing.assert_shape(y, "5|4")
    np.testing.assert_allclose(_ev(y), x @ w.T + b, rtol=1e-12)


def test_fma_agrees_with_the_two_op_form_and_makes_no_intermediate() -> None:
    w, x, c = _r(2, 3), _r(3, 4), _r(2, 4)  # 3 -> 2, 4 -> 3, and c the result's 4 -> 2
    W, X, C = (oc.ndarray(a, input_axes=1) for a in (w, x, c))
    y = oc.fma(W, X, C)
    oc.testing.assert_shape(y, "4->2")
    assert len(y.operands) == 3 and all(o.op is None for o in y.operands)
    np.testing.assert_allclose(_ev(y), _ev(W @ X + C), rtol=1e-12)
    np.testing.assert_allclose(_ev(y), w @ x + c, rtol=1e-12)


def test_fma_c_broadcasts_like_pointwise_and_numbers_lift() -> None:
    w, x = _r(3, 2), _r(2)
    y = oc.fma(oc.ndarray(w, input_axes=1), oc.ndarray(x), 0.5)
    np.testing.assert_allclose(_ev(y), w @ x + 0.5, rtol=1e-12)


def test_fma_result_grows_to_a_larger_c() -> None:
    """c with a batch axis the compose lacks: a @ b broadcasts into it (values, grads)."""
    w, x, c = _r(2, 4), _r(4), _r(3, 2)
    y = oc.fma(oc.ndarray(w, input_axes=1), oc.ndarray(x), oc.ndarray(c, batch_axes=1))
    oc.testing.assert_shape(y, "3|2")
    np.testing.assert_allclose(_ev(y), w @ x + c, rtol=1e-12)

    def fn(w: oc.Tensor, x: oc.Tensor, c: oc.Tensor) -> oc.Tensor:
        y = oc.fma(_as_weight(w), x, oc.einsum("bo => b|o", c))
        return oc.einsum("b|o => ", y * y)

    oc.testing.check_grads(fn, [w, x, c], rtol=1e-6, atol=1e-8)


def test_fma_gradients_reach_all_three_operands() -> None:
    def fn(w: oc.Tensor, x: oc.Tensor, b: oc.Tensor) -> oc.Tensor:
        y = oc.fma(_as_weight(w), oc.einsum("bi => b|i", x), b)
        return oc.einsum("b|o => ", y * y)

    oc.testing.check_grads(fn, [_r(3, 2), _r(4, 2), _r(3)], rtol=1e-6, atol=1e-8)


def test_fma_gradient_of_a_broadcast_c_sums_over_the_batch() -> None:
    """c is read once per cell of the result: its gradient is g summed over the batch
    (not multiplied by the contracted size, as reading it inside the reduction would)."""
    w = oc.param("fw", init=oc.ndarray(_r(2, 3), input_axes=1))
    c = oc.param("fc", init=oc.ndarray(_r(2)))
    x = oc.ndarray(_r(4, 3), batch_axes=1)
    loss = oc.einsum("b|o => ", oc.fma(w, x, c))
    _, (gc,) = oc.value_and_grad(loss, [c], ctx=oc.Context(precision="float64"))
    np.testing.assert_allclose(gc, [4.0, 4.0])


def test_fma_trains_like_a_linear_layer() -> None:
    w = oc.param("ftw", init=oc.ndarray(np.zeros((1, 2)), input_axes=1))
    b = oc.param("ftb", init=oc.ndarray(np.zeros(1)))
    xs = RNG.uniform(-1, 1, size=(16, 2))
    ys = xs @ np.array([2.0, -1.0]) + 0.5
    x, t = oc.ndarray(xs, batch_axes=1), oc.ndarray(ys[:, None], batch_axes=1)
    d = oc.fma(w, x, b) - t
    loss = oc.einsum("b|o => ", d * d) / 16.0
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.3)])
    for _ in range(300):
        step()
    np.testing.assert_allclose(ctx.get(w).ravel(), [2.0, -1.0], atol=1e-4)
    np.testing.assert_allclose(ctx.get(b), [0.5], atol=1e-4)


def test_fma_shape_mismatch_is_a_located_shape_error() -> None:
    w, x = oc.ndarray(_r(4, 3), input_axes=1), oc.ndarray(_r(3))
    with pytest.raises(oc.ShapeError) as e:
        oc.fma(w, x, oc.ndarray(_r(5)))
    assert Path(__file__).name in str(e.value)


def test_fma_matches_torch_addmm() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch reference for fma (addmm)")
    a, b, c = _r(3, 4), _r(4, 2), _r(2)
    ref = torch.addmm(torch.tensor(c), torch.tensor(a), torch.tensor(b)).numpy()
    # compose: b's outputs meet a's inputs; a (3x4) is 4 -> 3, b (4x2) a batch of 2 columns
    # of 4, so the result is 2|3 (ref transposed) and c runs along its batch axis
    y = oc.fma(oc.ndarray(a, input_axes=1), oc.ndarray(b.T, batch_axes=1),
               oc.ndarray(c[:, None], batch_axes=1))
    np.testing.assert_allclose(_ev(y).T, ref, rtol=1e-12)


# ---- where with a spec, einsum3 ----------------------------------------------------------

def test_where_with_a_spec_lines_operands_up() -> None:
    m = (RNG.random((2, 3)) > 0.5).astype(float)
    rows, cols = _r(3), _r(2)
    y = oc.where(oc.ndarray(m), oc.ndarray(rows), oc.ndarray(cols), spec="ij;j;i=>ji")
    np.testing.assert_allclose(_ev(y), np.where(m, rows[None, :], cols[:, None]).T)


def test_where_with_a_spec_gradients() -> None:
    m = oc.ndarray((RNG.random((2, 3)) > 0.5).astype(float))

    def fn(a: oc.Tensor, b: oc.Tensor) -> oc.Tensor:
        y = oc.where(m, a, b, spec="ij;j;i=>ij")
        return oc.einsum("ij=>", y * y)

    oc.testing.check_grads(fn, [_r(3), _r(2)], rtol=1e-6, atol=1e-8)


def test_where_with_a_reducing_spec_is_a_spec_error() -> None:
    with pytest.raises(oc.SpecError, match="never reduces"):
        oc.where(oc.ndarray(np.ones(3)), oc.ndarray(np.ones(3)), 0.0, spec="ij;i;i=>i")


def test_einsum3_where_and_fma_values() -> None:
    m = (RNG.random((2, 3)) > 0.5).astype(float)
    r, c = _r(3), _r(2)
    y = oc.einsum3("ij;j;i=>ij", "where", oc.ndarray(m), oc.ndarray(r), oc.ndarray(c))
    np.testing.assert_allclose(_ev(y), np.where(m, r[None, :], c[:, None]))
    a, b, cc = _r(2, 3), _r(3, 4), _r(4)
    z = oc.einsum3("ij;jk;k=>ik", "fma", oc.ndarray(a), oc.ndarray(b), oc.ndarray(cc))
    np.testing.assert_allclose(_ev(z), a @ b + 3 * cc[None, :], rtol=1e-12)  # c in each term
    s = oc.einsum3("ij;ij;i=>ij", "fma", oc.ndarray(a), oc.ndarray(a), oc.ndarray(c))
    np.testing.assert_allclose(_ev(s), a * a + c[:, None], rtol=1e-12)


@pytest.mark.parametrize("op", ["where", "fma"])
def test_einsum3_gradients(op: str) -> None:
    m = oc.ndarray((RNG.random((2, 3)) > 0.5).astype(float))

    def fn(a: oc.Tensor, b: oc.Tensor, c: oc.Tensor) -> oc.Tensor:
        y = oc.einsum3("ij;jk;k=>ik", op, m if op == "where" else a, b, c)
        return oc.einsum("ik=>", y * y)

    oc.testing.check_grads(fn, [_r(2, 3), _r(3, 4), _r(4)], rtol=1e-6, atol=1e-8)


def test_einsum3_bad_arguments() -> None:
    x = oc.ndarray(np.ones(3))
    with pytest.raises(oc.ArgumentError, match="op must be one of"):
        oc.einsum3("i;i;i=>i", "max", x, x, x)
    with pytest.raises(oc.ShapeError, match="has 2 operand"):
        oc.einsum3("i;i=>i", "fma", x, x, x)
    with pytest.raises(oc.SpecError):
        oc.einsum3("i;i;i=>i)", "fma", x, x, x)
