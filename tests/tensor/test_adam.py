"""oc.adam_update: AdamW (decoupled weight decay, bias-corrected moments) compiled with
oc.grad_update into one routine, against a NumPy AdamW on a tiny linear regression (float64,
trajectories to 1e-6), plus float32, a tensor learning rate and argument validation.

NumPy reference (per parameter p, gradient g, step t = 1, 2, ...):
    p -= lr * wd * p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g
    p -= lr * (m / (1 - b1**t)) / (sqrt(v / (1 - b2**t)) + eps)
"""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

N = 6
X = np.array([[0.5, -1.0], [1.5, 0.3], [-0.7, 0.8], [0.2, 0.1], [-1.2, -0.4], [0.9, 1.1]])
Y = X @ np.array([2.0, -3.0]) + 0.5 + np.array([0.05, -0.02, 0.01, 0.0, -0.03, 0.04])
W0 = np.array([[0.1, 0.2]])
B0 = np.array([-0.3])


def _model() -> tuple[oc.Tensor, oc.Tensor, oc.Tensor]:
    w = oc.param("adam_w", batch_dims=[], output_dims=[1], input_dims=[2], init=W0.copy())
    b = oc.param("adam_b", batch_dims=[], output_dims=[1], init=B0.copy())
    x = oc.ndarray(X, batch_axes=1)
    y = oc.ndarray(Y[:, None], batch_axes=1)
    diff = w @ x + b - y
    return w, b, oc.einsum("b|->o=>", diff * diff) * (1.0 / N)


def _np_grads(w: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    diff = X @ w[0] + b[0] - Y
    return (float((diff * diff).sum() / N), (2.0 / N) * (diff @ X)[None, :],
            np.array([(2.0 / N) * diff.sum()]))


def _np_adamw(steps: int, lr: float, b1: float, b2: float, eps: float, wd: float
              ) -> tuple[np.ndarray, np.ndarray, list[float]]:
    params = [W0.copy(), B0.copy()]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    losses = []
    for t in range(1, steps + 1):
        loss, gw, gb = _np_grads(*params)
        losses.append(loss)
        for p, g, m, v in zip(params, (gw, gb), ms, vs, strict=True):
            p -= lr * wd * p
            m[...] = b1 * m + (1 - b1) * g
            v[...] = b2 * v + (1 - b2) * g * g
            p -= lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
    return params[0], params[1], losses


@pytest.mark.parametrize(("lr", "betas", "eps", "wd"), [
    (1e-3, (0.9, 0.999), 1e-8, 0.0),  # the defaults
    (0.05, (0.9, 0.999), 1e-8, 0.0),
    (0.05, (0.8, 0.99), 1e-3, 0.1),
    (0.2, (0.5, 0.9), 1e-6, 0.01),
    (0.05, (0.0, 0.0), 1e-8, 0.0),  # sign-like steps: m = g, v = g*g
])
def test_adamw_trajectory_matches_numpy(lr: float, betas: tuple[float, float], eps: float,
                                        wd: float) -> None:
    steps = 8
    w, b, loss = _model()
    ctx = oc.Context(precision="float64")
    kw = {} if lr == 1e-3 and betas == (0.9, 0.999) and eps == 1e-8 and wd == 0.0 else \
        {"learning_rate": lr, "betas": betas, "eps": eps, "weight_decay": wd}
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, **kw)])
    losses, ws, bs = [], [], []
    for _ in range(steps):
        step()
        losses.append(float(ctx.get(loss).reshape(-1)[0]))
        ws.append(ctx.get(w))
        bs.append(ctx.get(b))
    for k in range(steps):
        ref_w, ref_b, ref_losses = _np_adamw(k + 1, lr, *betas, eps, wd)
        np.testing.assert_allclose(ws[k], ref_w, rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(bs[k], ref_b, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    assert not np.allclose(ws[-1], W0)  # the params really moved


def test_adamw_float32_and_tensor_learning_rate() -> None:
    w, b, loss = _model()
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss),
                        oc.adam_update(loss, learning_rate=oc.number(0.05), weight_decay=0.1)])
    for _ in range(5):
        step()
    ref_w, ref_b, _ = _np_adamw(5, 0.05, 0.9, 0.999, 1e-8, 0.1)
    np.testing.assert_allclose(ctx.get(w), ref_w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ctx.get(b), ref_b, rtol=1e-4, atol=1e-5)


def test_adamw_converges() -> None:
    _, _, loss = _model()
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.1)])
    for _ in range(400):
        step()
    assert float(ctx.get(loss).reshape(-1)[0]) < 1e-2


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"betas": (0.9,)}, "betas must be a pair"),
    ({"betas": (0.9, 1.0)}, r"betas\[1\] must be in \[0, 1\)"),
    ({"betas": (-0.1, 0.9)}, r"betas\[0\]"),
    ({"eps": -1.0}, "eps must be a finite number >= 0"),
    ({"weight_decay": -0.5}, "weight_decay must be a finite number >= 0"),
    ({"learning_rate": "fast"}, "learning_rate"),
    ({"learning_rate": float("nan")}, "learning_rate must be a finite number >= 0, got nan"),
    ({"learning_rate": float("inf")}, "learning_rate must be a finite"),
    ({"learning_rate": -0.1}, "learning_rate must be a finite number >= 0"),
    ({"eps": float("nan")}, "eps must be a finite"),
    ({"weight_decay": float("nan")}, "weight_decay must be a finite"),
    ({"betas": (float("nan"), 0.9)}, r"betas\[0\]"),
])
def test_adam_update_rejects_bad_arguments(kwargs: dict[str, object], match: str) -> None:
    _, _, loss = _model()
    with pytest.raises(oc.OcannlError, match=match):  # a type error: RuntimeDataError
        oc.adam_update(loss, **kwargs)  # type: ignore[arg-type]


def test_adam_update_rejects_non_tensor_loss() -> None:
    with pytest.raises(oc.ArgumentError, match="adam_update: loss"):
        oc.adam_update(np.ones(2))  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"learning_rate": float("nan")}, "learning_rate must be a finite number >= 0, got nan"),
    ({"learning_rate": -1.0}, "learning_rate must be a finite"),
    ({"learning_rate": 0.1, "momentum": float("nan")}, "momentum must be a finite"),
    ({"learning_rate": 0.1, "momentum": float("inf")}, "momentum must be a finite"),
    ({"learning_rate": 0.1, "weight_decay": float("nan")}, "weight_decay must be a finite"),
])
def test_sgd_update_rejects_non_finite_arguments(kwargs: dict[str, object], match: str) -> None:
    _, _, loss = _model()
    with pytest.raises(oc.ArgumentError, match=match) as info:
        oc.sgd_update(loss, **kwargs)  # type: ignore[arg-type]
    assert "test_adam.py" in str(info.value)  # located at the caller's line


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -1e-5])
def test_layer_norm_rejects_a_bad_eps(eps: float) -> None:
    with pytest.raises(oc.ArgumentError, match="layer_norm: eps must be a finite number >= 0"):
        oc.nn.layer_norm(eps=eps)
