"""oc.nn.batch_norm from the user's side: training-mode values and running statistics vs a
NumPy reimplementation of torch.nn.BatchNorm1d/2d (and vs torch itself when importable),
eval mode (`oc.nn.eval_mode()` / `train=False`), gradients (check_grads), training with an
optimizer, checkpointing of the running statistics, argument errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc


class NumpyBatchNorm:
    """torch.nn.BatchNorm semantics over the last axis (features), NumPy."""

    def __init__(self, features: int, momentum: float = 0.1, eps: float = 1e-5) -> None:
        self.mean, self.var = np.zeros(features), np.ones(features)
        self.momentum, self.eps = momentum, eps

    def train(self, x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
        axes = tuple(range(x.ndim - 1))
        mean, var = x.mean(axis=axes), x.var(axis=axes)
        n = x.size // x.shape[-1]
        m = self.momentum
        self.mean = (1 - m) * self.mean + m * mean
        self.var = (1 - m) * self.var + m * var * n / (n - 1)
        return (x - mean) / np.sqrt(var + self.eps) * gain + bias

    def eval(self, x: np.ndarray, gain: np.ndarray, bias: np.ndarray) -> np.ndarray:
        return (x - self.mean) / np.sqrt(self.var + self.eps) * gain + bias


def _data(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=shape) * 3.0 + 2.0


@pytest.mark.parametrize("shape", [(8, 3), (4, 5, 5, 2), (6, 4, 3)])
@pytest.mark.parametrize("momentum", [0.1, 0.5])
def test_training_forward_and_running_stats_match_numpy(shape, momentum) -> None:
    data = [_data(shape, k) for k in range(3)]
    t = oc.term("bn_input", batch_dims=shape[:1], output_dims=shape[1:])
    bn = oc.nn.batch_norm(momentum=momentum)
    y = bn(t)
    ref = NumpyBatchNorm(shape[-1], momentum)
    ctx = oc.Context(precision="float64")
    for d in data:
        ctx.set(t, d)
        got = ctx.eval(y)
        np.testing.assert_allclose(got, ref.train(d, 1.0, 0.0), rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(ctx.get(bn.running_mean), ref.mean, rtol=1e-12)
        np.testing.assert_allclose(ctx.get(bn.running_var), ref.var, rtol=1e-12)
    with oc.nn.eval_mode():
        y_eval = bn(t)
    test = _data(shape, 9)
    ctx.set(t, test)
    np.testing.assert_allclose(ctx.eval(y_eval), ref.eval(test, 1.0, 0.0), rtol=1e-10)
    # evaluating in eval mode leaves the statistics alone
    np.testing.assert_allclose(ctx.get(bn.running_mean), ref.mean, rtol=1e-12)


def test_train_false_is_eval_mode_and_train_true_overrides_eval_mode() -> None:
    data = _data((5, 4))
    x = oc.ndarray(data, batch_axes=1)
    bn = oc.nn.batch_norm()
    ctx = oc.Context(precision="float64")
    fresh = NumpyBatchNorm(4)
    # untouched statistics (mean 0, var 1): eval is x / sqrt(1 + eps)
    np.testing.assert_allclose(ctx.eval(bn(x, train=False)), fresh.eval(data, 1.0, 0.0))
    with oc.nn.eval_mode():
        forced = bn(x, train=True)
    np.testing.assert_allclose(ctx.eval(forced), fresh.train(data, 1.0, 0.0), atol=1e-12)


def test_gain_and_bias_are_params_and_stats_are_not_trainable() -> None:
    x = oc.ndarray(_data((4, 3)), batch_axes=1)
    bn = oc.nn.batch_norm()
    y = bn(x)
    oc.infer_shapes(y)
    assert [(p.name.split(".")[-1], str(p.shape)) for p in y.params()] == \
        [("bn_gain", "3"), ("bn_bias", "3")]
    y_eval = bn(x, train=False)
    names = sorted(p.name.split(".")[-1] for p in y_eval.params())
    assert names == ["bn_bias", "bn_gain", "bn_running_mean", "bn_running_var"]
    assert not bn.running_mean.diff and not bn.running_var.diff
    # an optimizer over a loss that reads the statistics leaves them alone
    loss = oc.nn.mse(y_eval, oc.ndarray(np.zeros((4, 3)), batch_axes=1))
    ctx = oc.Context(precision="float64")
    ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.1)])()
    np.testing.assert_array_equal(ctx.get(bn.running_var), np.ones(3))


def test_gradients_in_training_mode() -> None:
    up = np.random.default_rng(3).normal(size=(6, 3))
    weights = oc.ndarray(up)
    bn = oc.nn.batch_norm()
    oc.testing.check_grads(lambda x: oc.einsum("n,f;n,f=>", bn(x), weights), [_data((6, 3), 4)])


def test_gradients_in_eval_mode() -> None:
    up = np.random.default_rng(5).normal(size=(2, 3, 2))
    weights = oc.ndarray(up)
    bn = oc.nn.batch_norm()
    oc.testing.check_grads(lambda x: oc.einsum("a,b,f;a,b,f=>", bn(x, train=False), weights),
                           [_data((2, 3, 2), 6)])


def _torch_run(torch, data, target, steps, conv):
    """torch BatchNorm (1d on (N, C), 2d on (N, C, H, W)) + Adam on mse; channels last in
    and out. Returns the outputs per step, the final weight, bias and running stats."""
    c = data.shape[-1]
    bn = (torch.nn.BatchNorm2d if conv else torch.nn.BatchNorm1d)(c, momentum=0.2).double()
    opt = torch.optim.Adam(bn.parameters(), lr=0.05)
    xt, yt = torch.tensor(data), torch.tensor(target)
    outs = []
    for _ in range(steps):
        opt.zero_grad()
        out = bn(xt.permute(0, 3, 1, 2)).permute(0, 2, 3, 1) if conv else bn(xt)
        loss = ((out - yt) ** 2).mean()
        loss.backward()
        opt.step()
        outs.append(out.detach().numpy())
    bn.eval()
    with torch.no_grad():
        ev = bn(xt.permute(0, 3, 1, 2)).permute(0, 2, 3, 1) if conv else bn(xt)
    return outs, ev.numpy(), bn.running_mean.numpy(), bn.running_var.numpy()


@pytest.mark.parametrize("shape", [(8, 3), (4, 3, 3, 2)], ids=["1d", "2d"])
def test_training_with_adam_matches_torch(shape) -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is the optional oracle of this test")
    data, target = _data(shape, 10), np.random.default_rng(11).normal(size=shape)
    x = oc.ndarray(data, batch_axes=1)
    bn = oc.nn.batch_norm(momentum=0.2)
    y = bn(x)
    loss = oc.nn.mse(y, oc.ndarray(target, batch_axes=1))
    with oc.nn.eval_mode():
        y_eval = bn(x)
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.05)])
    outs = []
    for _ in range(5):
        step()
        outs.append(ctx.get(y))
    t_outs, t_eval, t_mean, t_var = _torch_run(torch, data, target, 5, len(shape) == 4)
    np.testing.assert_allclose(ctx.get(bn.running_mean), t_mean, rtol=1e-10)
    np.testing.assert_allclose(ctx.get(bn.running_var), t_var, rtol=1e-10)
    np.testing.assert_allclose(ctx.eval(y_eval), t_eval, rtol=1e-8, atol=1e-10)
    for got, want in zip(outs, t_outs, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)


def test_running_stats_are_saved_and_loaded(tmp_path: Path) -> None:
    data = _data((6, 2))
    x = oc.ndarray(data, batch_axes=1)
    bn = oc.nn.batch_norm()
    y = bn(x)
    y_eval = bn(x, train=False)
    ctx = oc.Context(precision="float64")
    for _ in range(3):
        ctx.eval(y)
    want = ctx.eval(y_eval)
    ctx.save(tmp_path / "bn.safetensors")
    fresh = oc.Context(precision="float64")
    fresh.compile(y_eval.forward_all())
    fresh.load(tmp_path / "bn.safetensors")
    np.testing.assert_array_equal(fresh.get(bn.running_var), ctx.get(bn.running_var))
    np.testing.assert_allclose(fresh.eval(y_eval), want, rtol=1e-12)
    assert not np.allclose(fresh.get(bn.running_mean), 0.0)


def test_one_value_per_feature_is_a_located_error() -> None:
    with pytest.raises(oc.ShapeError, match="one value per feature") as e:
        oc.nn.batch_norm()(oc.ndarray(np.ones((1, 4)), batch_axes=1))
    assert e.value.span is not None and e.value.span.file == __file__
    # in eval mode one example is fine
    out = oc.eval(oc.nn.batch_norm()(oc.ndarray(np.ones((1, 4)), batch_axes=1), train=False))
    assert out.shape == (1, 4)


@pytest.mark.parametrize("kwargs", [{"momentum": -0.1}, {"momentum": 1.5},
                                    {"momentum": float("nan")}, {"eps": -1.0},
                                    {"eps": float("nan")}, {"eps": float("inf")}])
def test_bad_hyperparameters(kwargs) -> None:
    with pytest.raises(oc.ArgumentError, match=next(iter(kwargs))) as e:
        oc.nn.batch_norm(**kwargs)
    assert e.value.span is not None and e.value.span.file == __file__


def test_bad_train_flag_and_input() -> None:
    bn = oc.nn.batch_norm()
    with pytest.raises(oc.ArgumentError, match="train"):
        bn(oc.ndarray(np.ones((3, 2)), batch_axes=1), train="yes")
    with pytest.raises(oc.ArgumentError):
        bn(np.ones((3, 2)))


def test_float32_constant_feature_is_exact_and_large_offsets_are_stable() -> None:
    """A constant feature normalizes to exactly 0 in float32 (the mean is sum / count, the
    variance two-pass), and a feature with a large offset matches float64 NumPy."""
    data = np.full((16, 3), 100.0)
    data[:, 1] = np.linspace(-1.0, 1.0, 16) * 1000.0 + 12345.678
    bn = oc.nn.batch_norm()
    got = oc.Context().eval(bn(oc.ndarray(data, batch_axes=1)))
    assert not got[:, [0, 2]].any()
    ref = NumpyBatchNorm(3).train(data, 1.0, 0.0)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-5)
