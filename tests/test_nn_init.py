"""oc.init strategies from the user's side (issue 20, item 2): torch.nn.init's formulas with
fan_in / fan_out from the param's input / output dims (inferred ones included), statistics
of large params against those formulas (and against torch's own draws where torch is
importable), determinism per seed and name, the oc.nn layers' PyTorch defaults, and
argument errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ocannl_ast as oc

FAN_IN, FAN_OUT = 384, 256  # a weight `384 -> 256`: torch's (256, 384)


def _draw(strategy: oc.init.InitStrategy, name: str = "w_stats") -> np.ndarray:
    w = oc.param(name, input_dims=[FAN_IN], output_dims=[FAN_OUT], init=strategy)
    vals = oc.Context().eval(w)
    assert vals.shape == (FAN_OUT, FAN_IN)
    return vals


def _check_uniform(vals: np.ndarray, bound: float) -> None:
    assert vals.min() >= -bound and vals.max() < bound
    assert vals.min() < -0.99 * bound and vals.max() > 0.99 * bound
    assert abs(vals.mean()) < 0.01 * bound
    assert abs(vals.std() / (bound / math.sqrt(3)) - 1) < 0.01


def _check_normal(vals: np.ndarray, mean: float, std: float) -> None:
    assert abs(vals.mean() - mean) < 0.02 * std  # 6 standard errors of the mean
    assert abs(vals.std() / std - 1) < 0.01
    # the tails of a normal, not of a uniform: about 4.6% beyond 2 std
    assert 0.04 < np.mean(np.abs(vals - mean) > 2 * std) < 0.052


@pytest.mark.parametrize("strategy,bound", [
    (oc.init.uniform(-0.3, 0.7), None),
    (oc.init.kaiming_uniform(), 1 / math.sqrt(FAN_IN)),
    (oc.init.kaiming_uniform(0.0), math.sqrt(6 / FAN_IN)),
    (oc.init.kaiming_uniform(1.0, mode="fan_out"), math.sqrt(3 / FAN_OUT)),
    (oc.init.xavier_uniform(), math.sqrt(6 / (FAN_IN + FAN_OUT))),
    (oc.init.xavier_uniform(2.0), 2 * math.sqrt(6 / (FAN_IN + FAN_OUT))),
])
def test_uniform_strategies_match_torch_formulas(strategy, bound) -> None:
    vals = _draw(strategy)
    if bound is None:  # U(-0.3, 0.7)
        assert vals.min() >= -0.3 and vals.max() < 0.7
        assert abs(vals.mean() - 0.2) < 0.01
        return
    _check_uniform(vals, bound)


@pytest.mark.parametrize("strategy,mean,std", [
    (oc.init.normal(0.02), 0.0, 0.02),
    (oc.init.normal(std=2.0, mean=-1.0), -1.0, 2.0),
    (oc.init.kaiming_normal(), 0.0, math.sqrt(2 / FAN_IN)),
    (oc.init.kaiming_normal(mode="fan_out"), 0.0, math.sqrt(2 / FAN_OUT)),
    (oc.init.xavier_normal(), 0.0, math.sqrt(2 / (FAN_IN + FAN_OUT))),
])
def test_normal_strategies_match_torch_formulas(strategy, mean, std) -> None:
    _check_normal(_draw(strategy), mean, std)


@pytest.mark.parametrize("name", ["kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
                                  "xavier_normal_"])
def test_statistics_match_torch_draws(name: str) -> None:
    torch = pytest.importorskip("torch", reason="torch.nn.init is the oracle of this test")
    ref = torch.empty(FAN_OUT, FAN_IN)
    getattr(torch.nn.init, name)(ref, **({"a": math.sqrt(5)} if name == "kaiming_uniform_"
                                         else {}))
    ref_np = ref.numpy()
    ours = _draw(getattr(oc.init, name[:-1])(), f"w_{name}")
    assert abs(ours.std() / ref_np.std() - 1) < 0.02
    assert abs(np.abs(ours).max() / np.abs(ref_np).max() - 1) < (0.01 if "uniform" in name
                                                                  else 0.25)


def test_fans_come_from_inferred_dims() -> None:
    """A weight whose input dims come from the data: fan_in is read after inference."""

    @oc.op
    def layer(x):
        return {w := oc.init.kaiming_uniform(0.0), o := [50]} @ x  # noqa: F841

    xs = np.ones((2, 600))
    y = layer(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context()
    ctx.eval(y)
    (w,) = y.params()
    assert str(w.shape) == "600->50"
    _check_uniform(ctx.get(w), math.sqrt(6 / 600))


def test_strategy_values_are_deterministic_per_seed_and_name() -> None:
    def values(name: str) -> np.ndarray:
        return oc.Context().eval(oc.param(name, output_dims=[64], init=oc.init.normal(0.5)))

    a, b = values("det_a"), values("det_a_other")
    assert not np.array_equal(a, b)
    # a fresh context starts a new naming epoch: the rebuilt "det_a" has the same name, so
    # the same values (a rebuilt model initializes as the first build did)
    np.testing.assert_array_equal(a, values("det_a"))
    ctx = oc.Context()
    twice = [oc.param("det_b", output_dims=[64], init=oc.init.normal(0.5)) for _ in range(2)]
    assert [t.name for t in twice] == ["det_b", "det_b_1"]  # one epoch: numbered, new stream
    assert not np.array_equal(ctx.eval(twice[0]), ctx.eval(twice[1]))
    first = oc.param("det_same", output_dims=[64], init=oc.init.normal(0.5))
    np.testing.assert_array_equal(oc.Context().eval(first), oc.Context().eval(first))
    oc.set_seed(7)
    try:
        other_seed = oc.Context().eval(first)
    finally:
        oc.set_seed(0)
    assert not np.array_equal(other_seed, oc.Context().eval(first))


def test_nn_layers_default_to_pytorch_init() -> None:
    xs = np.ones((2, 3, 200))
    x = oc.ndarray(xs, batch_axes=1)
    lin = oc.nn.linear(300)(x)
    emb = oc.nn.embedding(500, 200)(oc.ndarray(np.zeros((2, 3))))
    ln = oc.nn.layer_norm()(x)
    conv = oc.nn.conv2d(40, 3)(oc.ndarray(np.ones((1, 4, 4, 30)), batch_axes=1))
    ctx = oc.Context()
    for t in (lin, emb, ln, conv):
        ctx.eval(t)
    w, b = lin.params()
    _check_uniform(ctx.get(w), 1 / math.sqrt(200))
    assert np.abs(ctx.get(b)).max() < 1 / math.sqrt(200)
    (table,) = emb.params()
    _check_normal(ctx.get(table), 0.0, 1.0)
    gain, bias = ln.params()
    assert np.all(ctx.get(gain) == 1.0) and np.all(ctx.get(bias) == 0.0)
    kernel, kbias = conv.params()
    assert str(kernel.shape) == "3,3,30->40"
    _check_uniform(ctx.get(kernel), 1 / math.sqrt(3 * 3 * 30))
    assert np.abs(ctx.get(kbias)).max() < 1 / math.sqrt(270)


def test_plain_params_keep_uniform_minus_one_one() -> None:
    vals = oc.Context().eval(oc.param("plain_default", output_dims=[4000]))
    assert vals.min() >= -1.0 and vals.max() < 1.0 and vals.max() > 0.99


@pytest.mark.parametrize("call,match", [
    (lambda: oc.init.uniform(1.0, -1.0), "low must be <= high"),
    (lambda: oc.init.uniform(float("nan")), "low must be a finite number"),
    (lambda: oc.init.normal(-0.1), "std must be a finite non-negative number"),
    (lambda: oc.init.normal("big"), "std"),
    (lambda: oc.init.kaiming_uniform(mode="fan_avg"), 'mode must be "fan_in" or "fan_out"'),
    (lambda: oc.init.kaiming_normal(a=float("inf")), "a must be a finite number"),
    (lambda: oc.init.xavier_uniform(-1.0), "gain must be a finite non-negative number"),
    (lambda: oc.param("bad_init", output_dims=[2], init="xavier"), "init must be"),
])
def test_bad_arguments_are_located_argument_errors(call, match) -> None:
    with pytest.raises(oc.ArgumentError, match=match) as e:
        call()
    assert "test_nn_init.py" in str(e.value)


def test_zero_fan_is_a_shape_error() -> None:
    w = oc.param("zero_fan", input_dims=[0], output_dims=[3], init=oc.init.kaiming_normal())
    with pytest.raises(oc.ShapeError, match="fan_in = 0"):
        oc.Context().eval(w)
