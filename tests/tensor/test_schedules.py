"""Learning-rate schedules (oc.lr_constant, oc.lr_warmup, oc.lr_cosine, oc.step_counter)
computed in the routine from a context-held step counter that the optimizer update
increments: the rates over a few dozen steps vs NumPy, and SGD / AdamW trajectories with a
schedule vs NumPy references to 1e-6 (float64), with and without weight decay."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ocannl_ast as oc

X = np.array([[0.5, -1.0], [1.5, 0.3], [-0.7, 0.8], [0.2, 0.1], [-1.2, -0.4], [0.9, 1.1]])
Y = X @ np.array([2.0, -3.0]) + 0.5
W0 = np.array([[0.1, 0.2]])


def _np_warmup(lr: float, warmup: int, t: int) -> float:
    return lr * min(1.0, (t + 1) / warmup)


def _np_cosine(lr: float, total: int, warmup: int, min_lr: float, t: int) -> float:
    if warmup and t < warmup:
        return lr * (t + 1) / warmup
    p = min(1.0, max(0.0, (t - warmup) / (total - warmup)))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * p))


def _model(name: str) -> tuple[oc.Tensor, oc.Tensor]:
    w = oc.param(name, output_dims=[1], input_dims=[2], init=W0.copy())
    diff = w @ oc.ndarray(X, batch_axes=1) - oc.ndarray(Y[:, None], batch_axes=1)
    return w, oc.einsum("b|->o=>", diff * diff) * (1.0 / len(X))


def _np_grad(w: np.ndarray) -> np.ndarray:
    return (2.0 / len(X)) * ((X @ w[0] - Y) @ X)[None, :]


SCHEDULES = [
    ("constant", lambda: oc.lr_constant(0.05), lambda t: 0.05),
    ("warmup", lambda: oc.lr_warmup(0.1, 7), lambda t: _np_warmup(0.1, 7, t)),
    ("cosine", lambda: oc.lr_cosine(0.1, 20), lambda t: _np_cosine(0.1, 20, 0, 0.0, t)),
    ("cosine_warm_min", lambda: oc.lr_cosine(0.08, 25, warmup_steps=5, min_lr=0.01),
     lambda t: _np_cosine(0.08, 25, 5, 0.01, t)),
    ("composed", lambda: oc.lr_cosine(0.1, 10, 2) * 0.5 + 0.001,
     lambda t: 0.5 * _np_cosine(0.1, 10, 2, 0.0, t) + 0.001),
]


@pytest.mark.parametrize("name,make,ref", SCHEDULES, ids=[s[0] for s in SCHEDULES])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_schedule_rates_match_numpy(name, make, ref, optimizer: str) -> None:
    lr = make()
    _, loss = _model(f"sched_{name}")
    update = (oc.sgd_update(loss, learning_rate=lr) if optimizer == "sgd"
              else oc.adam_update(loss, learning_rate=lr))
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), update])
    got = []
    for _ in range(30):
        step()
        got.append(float(ctx.get(lr).reshape(-1)[0]))
    np.testing.assert_allclose(got, [ref(t) for t in range(30)], rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("wd", [0.0, 0.1])
def test_adamw_with_cosine_schedule_matches_numpy(wd: float) -> None:
    lr = oc.lr_cosine(0.05, 8, warmup_steps=2, min_lr=0.005)
    w, loss = _model("sched_adam_w")
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=lr,
                                                             betas=(0.8, 0.99), weight_decay=wd)])
    p, m, v = W0.copy(), np.zeros_like(W0), np.zeros_like(W0)
    for t in range(12):
        step()
        g, lr_t = _np_grad(p), _np_cosine(0.05, 8, 2, 0.005, t)
        p = p - lr_t * wd * p
        m, v = 0.8 * m + 0.2 * g, 0.99 * v + 0.01 * g * g
        p = p - lr_t * (m / (1 - 0.8 ** (t + 1))) / (np.sqrt(v / (1 - 0.99 ** (t + 1))) + 1e-8)
        np.testing.assert_allclose(ctx.get(w), p, rtol=1e-6, atol=1e-9)
    assert not np.allclose(p, W0)


@pytest.mark.parametrize("momentum,wd", [(0.0, 0.0), (0.9, 0.01)])
def test_sgd_with_warmup_schedule_matches_numpy(momentum: float, wd: float) -> None:
    lr = oc.lr_warmup(0.1, 4)
    w, loss = _model("sched_sgd_w")
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(
        loss, learning_rate=lr, momentum=momentum, weight_decay=wd)])
    p, buf = W0.copy(), np.zeros_like(W0)
    for t in range(10):
        step()
        d = _np_grad(p) + wd * p
        buf = momentum * buf + d
        p = p - _np_warmup(0.1, 4, t) * (buf if momentum else d)
        np.testing.assert_allclose(ctx.get(w), p, rtol=1e-10, atol=1e-12)


def test_step_counter_custom_decay_and_state_in_context() -> None:
    t = oc.step_counter()
    lr = 0.2 / (1.0 + t)
    _, loss = _model("sched_custom")
    ctx = oc.Context(precision="float64")
    train = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=lr)])
    evaluate = ctx.compile(lr.forward_all())
    for k in range(5):
        train()
        assert float(ctx.get(t)[0]) == k + 1
        evaluate()  # reading the rate does not advance the counter
        assert float(ctx.get(t)[0]) == k + 1
        assert float(ctx.get(lr)[0]) == pytest.approx(0.2 / (k + 2), rel=1e-12)
    # a second routine in the same context continues from the held count
    again = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=lr)])
    again()
    assert float(ctx.get(t)[0]) == 6
    # another context starts at 0
    other = oc.Context(precision="float64")
    other.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=lr)])()
    assert float(other.get(t)[0]) == 1 and float(other.get(lr)[0]) == pytest.approx(0.2)


def test_lr_constant_trajectory_equals_a_float_rate() -> None:
    runs = []
    for rate in (0.05, oc.lr_constant(0.05)):
        w, loss = _model("sched_const")
        ctx = oc.Context(precision="float64")
        step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=rate)])
        for _ in range(6):
            step()
        runs.append(ctx.get(w))
    np.testing.assert_array_equal(runs[0], runs[1])


@pytest.mark.parametrize("call,match", [
    (lambda: oc.lr_constant(-1.0), "lr"),
    (lambda: oc.lr_constant("0.1"), "lr"),
    (lambda: oc.lr_warmup(0.1, 0), "warmup_steps"),
    (lambda: oc.lr_warmup(0.1, 2.5), "warmup_steps"),
    (lambda: oc.lr_cosine(0.1, 0), "total_steps"),
    (lambda: oc.lr_cosine(0.1, 10, warmup_steps=10), "warmup_steps"),
    (lambda: oc.lr_cosine(0.1, 10, warmup_steps=-1), "warmup_steps"),
    (lambda: oc.lr_cosine(0.1, 10, min_lr=float("nan")), "min_lr"),
    (lambda: oc.step_counter(3), "label"),
])
def test_schedule_argument_errors(call, match) -> None:
    with pytest.raises(oc.OcannlError, match=match):
        call()


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_tensor_rate_is_recomputed_by_every_routine_and_context(optimizer: str) -> None:
    """Regression: a tensor learning rate's forward code used to be embedded only in the
    first routine compiled with it; a second routine read a stale or missing value."""
    rate = oc.number(0.1) * 0.5
    finals = []
    for _ in range(2):
        w, loss = _model("sched_tensor_rate")
        ctx = oc.Context(precision="float64")
        update = (oc.sgd_update(loss, learning_rate=rate) if optimizer == "sgd"
                  else oc.adam_update(loss, learning_rate=rate))
        ctx.compile([oc.grad_update(loss), update])()
        finals.append(ctx.get(w))
        assert float(ctx.get(rate).reshape(-1)[0]) == 0.05
    np.testing.assert_array_equal(finals[0], finals[1])
    assert not np.allclose(finals[0], W0)
