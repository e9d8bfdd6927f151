"""`max_grad_norm=` on oc.adam_update and oc.sgd_update: gradients clipped by their global
L2 norm first, as torch.nn.utils.clip_grad_norm_ (`g *= min(1, max_norm / (norm + 1e-6))`).
References: a NumPy SGD / AdamW with that clipping over a few steps, and torch itself when
importable; plus the clipped gradients themselves, float32, and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

RNG = np.random.default_rng(0)
X = RNG.normal(size=(8, 3))
Y = RNG.normal(size=(8, 2)) * 5.0
W0 = RNG.normal(size=(2, 3))
B0 = RNG.normal(size=2)


def _model(scale: float = 1.0) -> tuple[oc.Tensor, oc.Tensor, oc.Tensor]:
    """A linear regression `scale * mean((X W^T + b - Y)^2)`: w (3->2), b (2)."""
    w = oc.param("clip_w", output_dims=[2], input_dims=[3], init=W0.copy())
    b = oc.param("clip_b", output_dims=[2], init=B0.copy())
    pred = w @ oc.ndarray(X, batch_axes=1) + b
    return w, b, oc.nn.mse(pred, oc.ndarray(Y, batch_axes=1)) * scale


def _np_grads(w: np.ndarray, b: np.ndarray, scale: float) -> list[np.ndarray]:
    d = (X @ w.T + b - Y) * (2.0 * scale / Y.size)
    return [d.T @ X, d.sum(0)]


def _np_clip(grads: list[np.ndarray], max_norm: float) -> tuple[list[np.ndarray], float]:
    total = float(np.sqrt(sum((g * g).sum() for g in grads)))
    coef = min(1.0, max_norm / (total + 1e-6))
    return [g * coef for g in grads], total


def _np_sgd(steps: int, lr: float, momentum: float, max_norm: float, scale: float
            ) -> tuple[list[np.ndarray], list[float]]:
    params = [W0.copy(), B0.copy()]
    bufs = [np.zeros_like(p) for p in params]
    norms = []
    for _ in range(steps):
        grads, total = _np_clip(_np_grads(*params, scale), max_norm)
        norms.append(total)
        for p, g, m in zip(params, grads, bufs, strict=True):
            m[...] = momentum * m + g
            p -= lr * m
    return params, norms


def _np_adam(steps: int, lr: float, max_norm: float, scale: float,
             b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8) -> list[np.ndarray]:
    params = [W0.copy(), B0.copy()]
    ms = [np.zeros_like(p) for p in params]
    vs = [np.zeros_like(p) for p in params]
    for t in range(1, steps + 1):
        grads, _ = _np_clip(_np_grads(*params, scale), max_norm)
        for p, g, m, v in zip(params, grads, ms, vs, strict=True):
            m[...] = b1 * m + (1 - b1) * g
            v[...] = b2 * v + (1 - b2) * g * g
            p -= lr * (m / (1 - b1**t)) / (np.sqrt(v / (1 - b2**t)) + eps)
    return params


@pytest.mark.parametrize("max_norm", [0.5, 3.0, 1e6])
def test_sgd_with_clipping_matches_numpy(max_norm) -> None:
    w, b, loss = _model()
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss),
                        oc.sgd_update(loss, learning_rate=0.05, momentum=0.9,
                                      max_grad_norm=max_norm)])
    for _ in range(6):
        step()
    (w_np, b_np), norms = _np_sgd(6, 0.05, 0.9, max_norm, 1.0)
    np.testing.assert_allclose(ctx.get(w), w_np, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ctx.get(b), b_np, rtol=1e-10, atol=1e-12)
    if max_norm == 0.5:
        assert min(norms) > max_norm  # the clipping was active at every step


def test_adam_with_clipping_matches_numpy_and_differs_without() -> None:
    w, b, loss = _model(scale=20.0)
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss),
                        oc.adam_update(loss, learning_rate=0.01, max_grad_norm=1.0)])
    for _ in range(5):
        step()
    w_np, b_np = _np_adam(5, 0.01, 1.0, 20.0)
    np.testing.assert_allclose(ctx.get(w), w_np, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ctx.get(b), b_np, rtol=1e-9, atol=1e-12)
    w_free, _ = _np_adam(5, 0.01, np.inf, 20.0)
    assert not np.allclose(w_np, w_free, rtol=1e-6)


def test_clipped_gradients_have_the_max_norm() -> None:
    """After the update routine the grads hold the clipped values: norm == max_norm."""
    w, b, loss = _model(scale=10.0)
    ctx = oc.Context(precision="float64")
    ctx.compile([oc.grad_update(loss),
                 oc.sgd_update(loss, learning_rate=0.0, max_grad_norm=0.25)])()
    grads = [ctx.get(w.grad), ctx.get(b.grad)]
    (gw, gb), total = _np_clip(_np_grads(W0, B0, 10.0), 0.25)
    assert total > 0.25
    np.testing.assert_allclose(grads[0], gw, rtol=1e-12)
    np.testing.assert_allclose(grads[1], gb, rtol=1e-12)
    assert np.isclose(np.sqrt(sum((g * g).sum() for g in grads)), 0.25, rtol=1e-5)


def test_float32_clipping_matches_numpy() -> None:
    w, b, loss = _model(scale=5.0)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss),
                        oc.adam_update(loss, learning_rate=0.02, max_grad_norm=0.3)])
    for _ in range(4):
        step()
    w_np, b_np = _np_adam(4, 0.02, 0.3, 5.0)
    np.testing.assert_allclose(ctx.get(w), w_np, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ctx.get(b), b_np, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_clipping_matches_torch(optimizer) -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is the optional oracle of this test")
    w, b, loss = _model(scale=3.0)
    ctx = oc.Context(precision="float64")
    update = (oc.sgd_update(loss, learning_rate=0.1, momentum=0.5, max_grad_norm=0.7)
              if optimizer == "sgd" else
              oc.adam_update(loss, learning_rate=0.05, max_grad_norm=0.7))
    step = ctx.compile([oc.grad_update(loss), update])
    tw = torch.tensor(W0, requires_grad=True)
    tb = torch.tensor(B0, requires_grad=True)
    opt = (torch.optim.SGD([tw, tb], lr=0.1, momentum=0.5) if optimizer == "sgd" else
           torch.optim.Adam([tw, tb], lr=0.05))
    xt, yt = torch.tensor(X), torch.tensor(Y)
    for _ in range(5):
        step()
        opt.zero_grad()
        (((xt @ tw.T + tb - yt) ** 2).mean() * 3.0).backward()
        torch.nn.utils.clip_grad_norm_([tw, tb], 0.7)
        opt.step()
    np.testing.assert_allclose(ctx.get(w), tw.detach().numpy(), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ctx.get(b), tb.detach().numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
@pytest.mark.parametrize("optimizer", ["sgd_update", "adam_update"])
def test_bad_max_grad_norm_is_a_located_error(optimizer, bad) -> None:
    _, _, loss = _model()
    with pytest.raises(oc.ArgumentError, match="max_grad_norm") as e:
        getattr(oc, optimizer)(loss, learning_rate=0.1, max_grad_norm=bad)
    assert e.value.span is not None and e.value.span.file == __file__


def test_max_grad_norm_must_be_a_number() -> None:
    _, _, loss = _model()
    with pytest.raises(oc.OcannlError, match="max_grad_norm"):
        oc.adam_update(loss, max_grad_norm="1.0")
