"""oc.nn layers and losses from the user's side: values vs NumPy references, gradients vs
float64 central differences (oc.testing.check_grads), and a tiny mlp + cross_entropy
training run with Adam. Each test uses its own Context, so results do not depend on order."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def _np_log_softmax(x: np.ndarray) -> np.ndarray:
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _data(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape)


def _one_hot(seed: int, n: int, k: int) -> np.ndarray:
    return np.eye(k)[np.random.default_rng(seed).integers(0, k, size=n)]


def test_linear_matches_numpy() -> None:
    xs = _data(0, (4, 3))
    x = oc.ndarray(xs, batch_axes=1)
    y = oc.nn.linear(5)(x)
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    w, b = y.params()
    assert (w.shape.output, w.shape.input, b.shape.output) == ((5,), (3,), (5,))
    np.testing.assert_allclose(got, xs @ ctx.get(w).T + ctx.get(b), rtol=1e-12)
    oc.testing.assert_shape(y, "4|5")


def test_linear_shares_params_across_uses() -> None:
    layer = oc.nn.linear(2)
    xs = _data(1, (3, 4))
    y1, y2 = layer(oc.ndarray(xs, batch_axes=1)), layer(oc.ndarray(2 * xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    a, b = ctx.eval(y1), ctx.eval(y2)
    w, bias = y1.params()
    assert {p.id for p in y2.params()} == {w.id, bias.id}
    np.testing.assert_allclose(b - bias_value(ctx, bias), 2 * (a - bias_value(ctx, bias)))


def bias_value(ctx: oc.Context, b: oc.Tensor) -> np.ndarray:
    return ctx.get(b)


@pytest.mark.parametrize("activation", [oc.relu, oc.tanh])
def test_mlp_matches_numpy(activation) -> None:
    xs = _data(2, (6, 3))
    y = oc.nn.mlp([4, 5, 2], activation=activation)(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    ps = y.params()
    assert len(ps) == 6
    act = {oc.relu: lambda v: np.maximum(v, 0.0), oc.tanh: np.tanh}[activation]
    by_shape = {(p.shape.output, p.shape.input): ctx.get(p) for p in ps}
    h = xs
    for i, (d_in, d_out) in enumerate([(3, 4), (4, 5), (5, 2)]):
        h = act(h) if i else h
        h = h @ by_shape[((d_out,), (d_in,))].T + by_shape[((d_out,), ())]
    np.testing.assert_allclose(got, h, rtol=1e-10, atol=1e-12)
    oc.testing.assert_shape(y, "6|2")


def test_mlp_rejects_bad_dims() -> None:
    for bad in ([], [3, 0], [2.5], "12"):
        with pytest.raises(oc.OcannlError, match="mlp: dims"):
            oc.nn.mlp(bad)
    with pytest.raises(oc.OcannlError, match="-1"):
        oc.nn.linear(-1)


@pytest.mark.parametrize("shape,batch_axes", [((4, 5), 1), ((2, 3, 4), 1), ((3, 2, 4), 2),
                                              ((6,), 0)])
def test_softmax_and_log_softmax_match_numpy(shape, batch_axes) -> None:
    xs = _data(3, shape) * 3.0
    x = oc.ndarray(xs, batch_axes=batch_axes)
    ctx = oc.Context(precision="float64")
    np.testing.assert_allclose(ctx.eval(oc.nn.log_softmax(x)), _np_log_softmax(xs),
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(ctx.eval(oc.nn.softmax(x)), np.exp(_np_log_softmax(xs)),
                               rtol=1e-12, atol=1e-14)


def test_softmax_is_stable_for_large_logits() -> None:
    xs = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1002.0, -1001.0]])
    x = oc.ndarray(xs, batch_axes=1)
    ctx = oc.Context()  # float32: exp(1000) would overflow without the max subtraction
    sm, lsm = ctx.eval(oc.nn.softmax(x)), ctx.eval(oc.nn.log_softmax(x))
    assert np.all(np.isfinite(sm)) and np.all(np.isfinite(lsm))
    np.testing.assert_allclose(sm, np.exp(_np_log_softmax(xs)), rtol=1e-5)
    np.testing.assert_allclose(lsm, _np_log_softmax(xs), rtol=1e-5, atol=1e-5)


def test_cross_entropy_matches_numpy() -> None:
    xs, ts = _data(4, (5, 3)), _one_hot(4, 5, 3)
    loss = oc.nn.cross_entropy(oc.ndarray(xs, batch_axes=1), oc.ndarray(ts, batch_axes=1))
    got = oc.Context(precision="float64").eval(loss)
    assert got.size == 1
    np.testing.assert_allclose(got.reshape(()), -np.mean(np.sum(ts * _np_log_softmax(xs), -1)),
                               rtol=1e-12)


def test_cross_entropy_rejects_mismatched_targets() -> None:
    logits = oc.ndarray(_data(5, (5, 3)), batch_axes=1)
    with pytest.raises(oc.ShapeError):
        oc.eval(oc.nn.cross_entropy(logits, oc.ndarray(_one_hot(5, 5, 4), batch_axes=1)))


@pytest.mark.parametrize("shape,batch_axes", [((5, 3), 1), ((7,), 1), ((2, 3, 2), 2)])
def test_mse_matches_numpy(shape, batch_axes) -> None:
    ps, ts = _data(6, shape), _data(7, shape)
    loss = oc.nn.mse(oc.ndarray(ps, batch_axes=batch_axes), oc.ndarray(ts, batch_axes=batch_axes))
    got = oc.Context(precision="float64").eval(loss)
    np.testing.assert_allclose(got.reshape(()), np.mean((ps - ts) ** 2), rtol=1e-12)


def _np_layer_norm(x: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layer_norm_matches_numpy(eps) -> None:
    xs = _data(8, (4, 6)) * 2.0 + 1.0
    y = oc.nn.layer_norm(eps)(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    np.testing.assert_allclose(ctx.eval(y), _np_layer_norm(xs, eps), rtol=1e-10, atol=1e-12)
    gain, bias = y.params()
    assert gain.shape.output == (6,) and bias.shape.output == (6,)
    g, b = _data(9, (6,)), _data(10, (6,))
    ctx.set(gain, g)
    ctx.set(bias, b)
    np.testing.assert_allclose(ctx.eval(y), _np_layer_norm(xs, eps) * g + b, rtol=1e-10,
                               atol=1e-12)


def test_layer_norm_only_last_axis_is_learned() -> None:
    xs = _data(11, (2, 3, 4))
    y = oc.nn.layer_norm()(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    np.testing.assert_allclose(ctx.eval(y), _np_layer_norm(xs, 1e-5), rtol=1e-9, atol=1e-12)
    assert [p.shape.output for p in y.params()] == [(4,), (4,)]


def test_grads_softmax_log_softmax() -> None:
    w = _data(12, (4, 3))
    oc.testing.check_grads(lambda x: oc.einsum("ij;ij=>", oc.nn.softmax(x),
                                               oc.ndarray(w)), [_data(13, (4, 3))])
    oc.testing.check_grads(lambda x: oc.einsum("ij;ij=>", oc.nn.log_softmax(x),
                                               oc.ndarray(w)), [_data(14, (4, 3))])


def test_grads_losses() -> None:
    ts = oc.ndarray(_one_hot(15, 4, 3))
    oc.testing.check_grads(lambda x: oc.nn.cross_entropy(x, ts), [_data(16, (4, 3))])
    oc.testing.check_grads(lambda p, t: oc.nn.mse(p, t), [_data(17, (4, 3)), _data(18, (4, 3))])


def test_grads_layer_norm_and_linear() -> None:
    w = oc.ndarray(_data(19, (4, 5)))
    oc.testing.check_grads(
        lambda x: oc.einsum("ij;ij=>", oc.nn.layer_norm(1e-3)(x), w),
        [_data(20, (4, 5))], rtol=1e-3, atol=1e-6)
    oc.testing.check_grads(lambda x: oc.nn.mse(oc.nn.mlp([3, 2], oc.tanh)(x),
                                               oc.ndarray(_data(21, (2,)))),
                           [_data(22, (4,))])


def test_mlp_cross_entropy_adam_training_decreases_loss() -> None:
    rng = np.random.default_rng(23)
    xs = rng.normal(size=(32, 2))
    labels = (xs[:, 0] * xs[:, 1] > 0).astype(int) + (xs[:, 0] > 1.0)
    x = oc.ndarray(xs, batch_axes=1)
    t = oc.ndarray(np.eye(3)[labels], batch_axes=1)
    loss = oc.nn.cross_entropy(oc.nn.mlp([16, 3])(x), t)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.05)])
    losses = []
    for _ in range(60):
        step()
        losses.append(float(ctx.get(loss).reshape(())))
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses


def test_cross_entropy_with_targets_of_another_shape_names_what_it_expects() -> None:
    """Logits left unflattened (2|4,4,10) against one-hot targets (2|10): the error named
    only cross_entropy's inner einsum and an internal tensor."""
    x = oc.ndarray(np.random.default_rng(0).normal(size=(2, 8, 8, 1)), batch_axes=1)
    t = oc.ndarray(np.eye(10)[[3, 7]], batch_axes=1)
    logits = oc.nn.linear(10)(oc.nn.max_pool2d(2)(oc.relu(oc.nn.conv2d(4, 3)(x))))
    try:
        oc.nn.cross_entropy(logits, t)
    except oc.ShapeError as e:
        msg = str(e)
        assert "cross_entropy: targets must be one-hot vectors with the logits' shape" in msg
        assert "targets 2|10" in msg and "test_nn.py" in msg
    else:
        raise AssertionError("no ShapeError")
