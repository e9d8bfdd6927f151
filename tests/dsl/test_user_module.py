"""Issue 4 acceptance: an ordinary module in the dialect imports, runs, and matches NumPy
and float64 central finite differences."""

from __future__ import annotations

import numpy as np
import pytest
import user_layers as ul

import ocannl_ast as oc

RNG = np.random.default_rng(7)


def test_mlp_layer_shares_params_across_applications_and_batch() -> None:
    layer = ul.mlp_layer(4)
    x = oc.ndarray(np.tile([[0.3, -0.7]], (3, 1)), batch_axes=1)
    h1, h2 = layer(x), layer(x)
    assert {t.id for t in h1.params()} == {t.id for t in h2.params()}
    assert len(h1.params()) == 2
    v = oc.eval(h1)
    assert v.shape == (3, 4)
    np.testing.assert_array_equal(v[0], v[1])  # one set of weights for the whole batch
    w, b = h1.params()
    assert w.shape.input == (2,) and w.shape.output == (4,) and w.shape.batch == ()
    ctx = oc.Context()
    ctx.compile(h1.forward)()
    ref = np.maximum(ctx.get(w) @ np.array([0.3, -0.7]) + ctx.get(b), 0)
    np.testing.assert_allclose(v[0], ref, rtol=1e-6, atol=1e-6)  # float32 sums, any order


@pytest.mark.parametrize("fn,ref", [(ul.row_sums, lambda a: a.sum(1)),
                                    (ul.column_sums, lambda a: a.sum(0)),
                                    (ul.row_max, lambda a: a.max(1))])
def test_named_index_reductions(fn, ref) -> None:
    a = RNG.normal(size=(3, 5))
    np.testing.assert_allclose(oc.eval(fn(oc.ndarray(a)), precision="float64"), ref(a))


def test_named_index_matmul_and_gradient() -> None:
    a0, b0 = RNG.normal(size=(2, 3)), RNG.normal(size=(3, 4))
    wts = RNG.normal(size=(2, 4))

    def loss_of(a: np.ndarray, b: np.ndarray) -> oc.Tensor:
        pa, pb = oc.param("a", init=a), oc.param("b", init=b)
        return oc.einsum("ik;ik=>", ul.matmul(pa, pb), oc.ndarray(wts)), pa, pb

    loss, pa, pb = loss_of(a0, b0)
    val, (ga, gb) = oc.value_and_grad(loss, [pa, pb], precision="float64")
    np.testing.assert_allclose(val, ((a0 @ b0) * wts).sum())
    np.testing.assert_allclose(ga, wts @ b0.T, rtol=1e-6)
    np.testing.assert_allclose(gb, a0.T @ wts, rtol=1e-6)
    oc.testing.check_grads(lambda a, b: oc.einsum("ik;ik=>", ul.matmul(a, b), oc.ndarray(wts)),
                           [a0, b0], rtol=1e-5, atol=1e-7)


def test_interleave_and_extract() -> None:
    a, b = np.array([1.0, 2.0, 3.0]), np.array([10.0, 20.0, 30.0])
    t, out = oc.node("t"), oc.node("out")
    ctx = oc.Context(precision="float64")
    ctx.compile([ul.interleave(t, oc.ndarray(a), oc.ndarray(b)), ul.evens(out, t)])()
    np.testing.assert_array_equal(ctx.get(t), [1, 10, 2, 20, 3, 30])
    np.testing.assert_array_equal(ctx.get(out), a)


@pytest.mark.parametrize("momentum,wd,nesterov", [(0.0, 0.0, False), (0.9, 0.01, False),
                                                  (0.9, 0.0, True)])
def test_user_sgd_one_matches_numpy(momentum: float, wd: float, nesterov: bool) -> None:
    x = RNG.normal(size=(8, 3))
    y = x @ np.array([1.0, -2.0, 0.5])
    w0 = RNG.normal(size=3)
    w = oc.param("w", input_dims=[3], output_dims=[1], init=w0.reshape(1, 3))
    pred = w @ oc.ndarray(x, batch_axes=1)
    err = pred - oc.ndarray(y.reshape(8, 1), batch_axes=1)
    loss = oc.einsum("b|o;b|o=>o", err, err) * (1.0 / 8)
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss),
                        ul.sgd_one(w, 0.1, momentum=momentum, weight_decay=wd,
                                   nesterov=nesterov)])
    wn, mom = w0.copy(), np.zeros(3)
    for _ in range(5):
        step()
        g = 2.0 / 8 * (x @ wn - y) @ x
        delta = g + wd * wn
        if momentum > 0:
            mom = momentum * mom + delta
            delta = delta + momentum * mom if nesterov else mom
        wn = wn - 0.1 * delta
    np.testing.assert_allclose(ctx.get(w).reshape(3), wn, rtol=1e-10)


def test_custom_unary_op_matches_finite_differences() -> None:
    x0 = RNG.normal(size=(2, 3))
    wts = RNG.normal(size=(2, 3))

    def loss_of(x: np.ndarray):
        p = oc.param("x", init=x)
        return oc.einsum("ij;ij=>", ul.cube(p), oc.ndarray(wts)), p

    loss, p = loss_of(x0)
    val, (g,) = oc.value_and_grad(loss, [p], precision="float64")
    np.testing.assert_allclose(val, (x0 ** 3 * wts).sum())
    np.testing.assert_allclose(g, 3 * x0 ** 2 * wts, rtol=1e-10)
    oc.testing.check_grads(lambda x: oc.einsum("ij;ij=>", ul.cube(x), oc.ndarray(wts)), [x0],
                           rtol=1e-6, atol=0.0)


def test_custom_binary_op_with_einsum_logic() -> None:
    a0, v0 = RNG.normal(size=(3, 4)), RNG.normal(size=4)
    pa, pv = oc.param("a", init=a0), oc.param("v", init=v0)
    out = ul.weighted_rows(pa, pv)
    loss = oc.einsum("i=>", out)
    val, (ga, gv) = oc.value_and_grad(loss, [pa, pv], precision="float64")
    np.testing.assert_allclose(val, (a0 @ v0).sum())
    np.testing.assert_allclose(ga, np.tile(v0, (3, 1)))
    np.testing.assert_allclose(gv, a0.sum(0))


def test_a_named_window_with_a_shift_matches_numpy() -> None:
    x, w = np.arange(8.0), np.array([1.0, 10.0, 100.0])
    got = oc.eval(ul.shifted_window(oc.ndarray(x), oc.ndarray(w)), precision="float64")
    want = [sum(x[o + 2 + k] * w[k] for k in range(3)) for o in range(4)]
    np.testing.assert_array_equal(got, want)


def test_cd_contractions_of_a_tensor_with_itself_match_numpy() -> None:
    """A @cd contraction read the same tensor twice as one operand ("compose takes 2
    operand(s), got 1"): each read is an operand of its own under an einsum or compose."""
    m = np.array([[1.0, 2.0], [3.0, 4.0]])
    w = oc.ndarray([(1.0, 2.0), (3.0, 4.0)])  # a 2->2 matrix (input -> output)
    v = oc.node("v_sq", output_dims=[2])
    ctx = oc.Context(precision="float64")
    ctx.compile(ul.composed(v, w, w))()
    np.testing.assert_array_equal(ctx.get(v), m @ m)
    x = oc.ndarray(m)
    t = oc.node("t_sq", output_dims=[2, 2])
    ctx.compile(ul.transposed_product(t, x, x))()
    np.testing.assert_array_equal(ctx.get(t), m * m.T)
