"""oc.nn.one_hot, embedding, gelu and dropout from the user's side: values vs NumPy,
gradients (check_grads or central differences of a NumPy reference), dropout mask
statistics, scaling, determinism per seed and step, eval mode, argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def _np_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


# --- one_hot / embedding -------------------------------------------------------------------


@pytest.mark.parametrize("ids,batch_axes", [([[0, 2, 1], [3, 3, 0]], 1), ([4, 0, 2], 0),
                                            ([[1], [0]], 1)])
def test_one_hot_matches_numpy(ids, batch_axes) -> None:
    arr = np.array(ids, dtype=float)
    got = oc.Context(precision="float64").eval(oc.nn.one_hot(oc.ndarray(arr, batch_axes=batch_axes), 5))
    np.testing.assert_array_equal(got, np.eye(5)[arr.astype(int)])


def test_one_hot_out_of_range_host_ids_are_errors() -> None:
    with pytest.raises(oc.RuntimeDataError, match=r"cell \(0,\) is -1.0, outside \[0, 3\) "
                                                  r"\(2 bad cell"):
        oc.nn.one_hot(oc.ndarray(np.array([-1.0, 3.0, 0.0, 2.0])), 3)


def test_ids_computed_in_the_routine_out_of_range_give_zero_rows() -> None:
    """Ids a routine computes never pass through the host: there the lookup matches
    nothing (documented), fractional ones too."""
    computed = oc.ndarray(np.array([-0.5, 1.5, 0.0, 1.0, 0.25])) * 2.0
    got = oc.eval(oc.nn.one_hot(computed, 3))
    np.testing.assert_array_equal(got, [[0, 0, 0], [0, 0, 0], [1, 0, 0], [0, 0, 1],
                                        [0, 0, 0]])


@pytest.mark.parametrize("batch", [(2,), (2, 3), ()])
def test_embedding_matches_table_lookup(batch) -> None:
    ids = np.random.default_rng(1).integers(0, 6, size=(*batch, 4))
    e = oc.nn.embedding(6, 3)(oc.ndarray(ids.astype(float), batch_axes=len(batch)))
    ctx = oc.Context(precision="float64")
    got = ctx.eval(e)
    (table,) = e.params()
    assert str(table.shape) == "6->3"
    np.testing.assert_array_equal(got, ctx.get(table).T[ids])
    oc.testing.assert_shape(e, "|".join(filter(None, [",".join(map(str, batch)), "4,3"])))


def test_embedding_gradient_reaches_only_looked_up_rows() -> None:
    ids = np.array([[0.0, 2.0, 2.0], [5.0, 0.0, 2.0]])
    up = np.random.default_rng(2).normal(size=(2, 3, 4))
    e = oc.nn.embedding(7, 4)(oc.ndarray(ids, batch_axes=1))
    loss = oc.einsum("b|s,d;b|s,d=>", e, oc.ndarray(up, batch_axes=1))
    _, (g,) = oc.value_and_grad(loss, e.params(), ctx=oc.Context(precision="float64"))
    expected = np.zeros((7, 4))
    np.add.at(expected, ids.astype(int), up)
    np.testing.assert_allclose(g, expected.T, rtol=1e-12)
    assert not g[:, [1, 3, 4, 6]].any()


def test_embedding_layer_shares_its_table() -> None:
    layer = oc.nn.embedding(4, 2)
    a = layer(oc.ndarray(np.array([0.0, 1.0])))
    b = layer(oc.ndarray(np.array([1.0, 3.0])))
    assert [p.id for p in a.params()] == [p.id for p in b.params()]
    ctx = oc.Context(precision="float64")
    np.testing.assert_array_equal(ctx.eval(a)[1], ctx.eval(b)[0])


# --- gelu ----------------------------------------------------------------------------------


def test_gelu_matches_numpy() -> None:
    xs = np.concatenate([np.linspace(-6, 6, 25), [-30.0, 30.0]])
    got = oc.Context(precision="float64").eval(oc.nn.gelu(oc.ndarray(xs)))
    np.testing.assert_allclose(got, _np_gelu(xs), rtol=1e-13, atol=1e-15)
    got32 = oc.Context().eval(oc.nn.gelu(oc.ndarray(xs)))
    np.testing.assert_allclose(got32, _np_gelu(xs), rtol=1e-5, atol=1e-6)


def test_gelu_grads() -> None:
    w = oc.ndarray(np.random.default_rng(3).normal(size=(3, 4)))
    oc.testing.check_grads(lambda x: oc.einsum("ij;ij=>", oc.nn.gelu(x), w),
                           [np.random.default_rng(4).normal(size=(3, 4)) * 2.0])


# --- dropout -------------------------------------------------------------------------------


def _x(seed: int, shape=(40, 50)) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape) + 3.0  # no exact zeros


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.8])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_dropout_mask_statistics_and_scaling(rate: float, precision: str) -> None:
    xs = _x(5)
    y = oc.nn.dropout(rate, seed=3)(oc.ndarray(xs, batch_axes=1))
    got = oc.Context(precision=precision).eval(y)
    dropped = got == 0.0
    sigma = np.sqrt(rate * (1 - rate) / xs.size)
    assert abs(dropped.mean() - rate) < 5 * sigma, dropped.mean()
    np.testing.assert_allclose(got[~dropped], xs[~dropped] / (1 - rate),
                               rtol=1e-6 if precision == "float32" else 1e-14)
    # no structure: rows and columns are dropped alike
    assert abs(dropped.mean(0).std() - np.sqrt(rate * (1 - rate) / xs.shape[0])) < 0.05


def test_dropout_is_deterministic_per_seed_and_step() -> None:
    xs = _x(6)
    layer = oc.nn.dropout(0.5, seed=1)
    y = layer(oc.ndarray(xs, batch_axes=1))
    a, b = oc.Context().eval(y), oc.Context().eval(y)
    np.testing.assert_array_equal(a, b)
    ctx = oc.Context()
    masks = []
    for step in range(4):
        ctx.set(layer.step, np.array([float(step)]))
        masks.append(ctx.eval(y) == 0.0)
    np.testing.assert_array_equal(masks[0], a == 0.0)
    for i in range(4):
        for j in range(i):
            assert (masks[i] != masks[j]).mean() > 0.3
    ctx.set(layer.step, np.array([2.0]))
    np.testing.assert_array_equal(ctx.eval(y) == 0.0, masks[2])


def test_dropout_seeds_and_layers_are_independent() -> None:
    x = oc.ndarray(_x(7), batch_axes=1)
    ys = [oc.nn.dropout(0.5, seed=s)(x) for s in (0, 0, 1)]
    ctx = oc.Context()
    m = [ctx.eval(y) == 0.0 for y in ys]
    assert (m[0] != m[1]).mean() > 0.3 and (m[0] != m[2]).mean() > 0.3


def test_dropout_mask_changes_each_training_step() -> None:
    xs = _x(8, (10, 20))
    w = oc.param("w", output_dims=[20], init=1.0)
    layer = oc.nn.dropout(0.5)
    h = layer(w * oc.ndarray(xs, batch_axes=1))
    loss = oc.einsum("b|i=>", h)
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.0)])
    masks = []
    for k in range(3):
        step()
        masks.append(ctx.get(h) == 0.0)
        assert float(ctx.get(layer.step)[0]) == k + 1
        # the gradient flows only through kept units, scaled by 1 / (1 - rate)
        expected = ((~masks[-1]) * xs / 0.5).sum(0)
        np.testing.assert_allclose(ctx.get(w.grad), expected, rtol=1e-12)
    assert (masks[0] != masks[1]).mean() > 0.3 and (masks[1] != masks[2]).mean() > 0.3


def test_dropout_grads_check() -> None:
    layer = oc.nn.dropout(0.3, seed=2)
    w = oc.ndarray(np.random.default_rng(9).normal(size=(5, 6)))
    oc.testing.check_grads(lambda x: oc.einsum("ij;ij=>", layer(x), w), [_x(10, (5, 6))])


def test_dropout_eval_mode_is_identity() -> None:
    layer = oc.nn.dropout(0.5)
    x = oc.ndarray(_x(11), batch_axes=1)
    assert layer(x, train=False) is x
    with oc.nn.eval_mode():
        assert layer(x) is x
        forced = layer(x, train=True)
    assert forced is not x and (oc.eval(forced) == 0.0).any()
    assert layer(x) is not x
    assert oc.nn.dropout(0.0)(x) is x


@pytest.mark.parametrize("rate", [-0.1, 1.0, 2, "0.5", None])
def test_dropout_rejects_bad_rate(rate) -> None:
    with pytest.raises(oc.OcannlError, match="rate"):
        oc.nn.dropout(rate)


def test_bad_arguments_of_embedding_and_one_hot() -> None:
    with pytest.raises(oc.OcannlError, match="vocab"):
        oc.nn.embedding(0, 3)
    with pytest.raises(oc.OcannlError, match="dim"):
        oc.nn.embedding(3, 2.5)
    with pytest.raises(oc.OcannlError, match="ids"):
        oc.nn.one_hot(np.array([1, 2]), 3)
    with pytest.raises(oc.OcannlError, match="seed"):
        oc.nn.dropout(0.5, seed=-1)
