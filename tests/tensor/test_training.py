"""Training: `oc.grad_update(loss)` and `oc.sgd_update(loss, ...)` compiled into one routine,
against a NumPy re-implementation of OCANNL's SGD on a tiny linear regression.

OCANNL SGD (per parameter p with gradient g):
    delta = g + weight_decay * p
    if momentum > 0: m = momentum * m + delta; delta = delta + momentum * m if nesterov else m
    p -= learning_rate * delta
"""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc

N = 6
X = np.array([[0.5, -1.0], [1.5, 0.3], [-0.7, 0.8], [0.2, 0.1], [-1.2, -0.4], [0.9, 1.1]])
W_TRUE = np.array([[2.0, -3.0]])
B_TRUE = np.array([0.5])
Y = (X @ W_TRUE.T)[:, 0] + B_TRUE[0] + np.array([0.05, -0.02, 0.01, 0.0, -0.03, 0.04])
W0 = np.array([[0.1, 0.2]])
B0 = np.array([-0.3])


def _model() -> tuple[oc.Tensor, oc.Tensor, oc.Tensor]:
    # batch_dims=[] spelled out: with it left None the params take the data's batch axis
    # (see the report); OCANNL params have no batch axes
    w = oc.param("w", batch_dims=[], output_dims=[1], input_dims=[2], init=W0.copy())
    b = oc.param("b", batch_dims=[], output_dims=[1], init=B0.copy())
    x = oc.ndarray(X, batch_axes=1)  # batch 6, output 2
    y = oc.ndarray(Y[:, None], batch_axes=1)  # batch 6, output 1
    diff = w @ x + b - y
    loss = oc.einsum("b|->o=>", diff * diff) * (1.0 / N)
    return w, b, loss


def _np_grads(w: np.ndarray, b: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    diff = X @ w[0] + b[0] - Y
    loss = float((diff * diff).sum() / N)
    gw = (2.0 / N) * (diff @ X)[None, :]
    gb = np.array([(2.0 / N) * diff.sum()])
    return loss, gw, gb


def _np_sgd(steps: int, lr: float | list[float], momentum: float, wd: float, nesterov: bool
            ) -> tuple[np.ndarray, np.ndarray, list[float]]:
    w, b = W0.copy(), B0.copy()
    mw, mb = np.zeros_like(w), np.zeros_like(b)
    losses = []
    for k in range(steps):
        rate = lr[k] if isinstance(lr, list) else lr
        loss, gw, gb = _np_grads(w, b)
        losses.append(loss)
        new = []
        for p, g, m in ((w, gw, mw), (b, gb, mb)):
            delta = g + wd * p
            if momentum > 0.0:
                m[...] = momentum * m + delta
                delta = delta + momentum * m if nesterov else m.copy()
            new.append(p - rate * delta)
        w, b = new
    return w, b, losses


def test_numpy_reference_gradient_is_right() -> None:
    # the reference's own gradient, against central differences
    eps = 1e-6
    _, gw, gb = _np_grads(W0, B0)
    for j in range(2):
        wp, wm = W0.copy(), W0.copy()
        wp[0, j] += eps
        wm[0, j] -= eps
        num = (_np_grads(wp, B0)[0] - _np_grads(wm, B0)[0]) / (2 * eps)
        assert gw[0, j] == pytest.approx(num, rel=1e-7)
    num_b = (_np_grads(W0, B0 + eps)[0] - _np_grads(W0, B0 - eps)[0]) / (2 * eps)
    assert gb[0] == pytest.approx(num_b, rel=1e-7)


def test_loss_and_grads_at_init() -> None:
    w, b, loss = _model()
    value, (gw, gb) = oc.value_and_grad(loss, [w, b], precision="float64")
    ref_loss, ref_gw, ref_gb = _np_grads(W0, B0)
    assert float(np.asarray(value).reshape(-1)[0]) == pytest.approx(ref_loss, rel=1e-13)
    np.testing.assert_allclose(gw, ref_gw, rtol=1e-13)
    np.testing.assert_allclose(gb, ref_gb, rtol=1e-13)


@pytest.mark.parametrize("momentum,wd,nesterov", [
    (0.0, 0.0, False),
    (0.0, 0.1, False),
    (0.9, 0.0, False),
    (0.5, 0.05, False),
    (0.9, 0.0, True),
    (0.7, 0.2, True),
])
def test_sgd_matches_numpy(momentum: float, wd: float, nesterov: bool) -> None:
    steps, lr = 7, 0.05
    w, b, loss = _model()
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss),
                        oc.sgd_update(loss, learning_rate=lr, momentum=momentum,
                                      weight_decay=wd, nesterov=nesterov)])
    losses = []
    for _ in range(steps):
        step()
        losses.append(float(ctx.get(loss).reshape(-1)[0]))
    ref_w, ref_b, ref_losses = _np_sgd(steps, lr, momentum, wd, nesterov)
    np.testing.assert_allclose(ctx.get(w), ref_w, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ctx.get(b), ref_b, rtol=1e-12, atol=1e-14)
    # the loss each step is computed before that step's update
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-12)
    # gradients left in the context are those of the last step's forward
    _, gw, gb = _np_grads(*_np_sgd(steps - 1, lr, momentum, wd, nesterov)[:2])
    np.testing.assert_allclose(ctx.get(w.grad), gw, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(ctx.get(b.grad), gb, rtol=1e-12, atol=1e-14)


def test_sgd_float32_close_to_numpy() -> None:
    w, b, loss = _model()
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss),
                        oc.sgd_update(loss, learning_rate=0.05, momentum=0.9, nesterov=True)])
    for _ in range(5):
        step()
    ref_w, ref_b, _ = _np_sgd(5, 0.05, 0.9, 0.0, True)
    assert ctx.get(w).dtype == np.float32
    np.testing.assert_allclose(ctx.get(w), ref_w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ctx.get(b), ref_b, rtol=1e-4, atol=1e-5)


def test_sgd_converges() -> None:
    w, b, loss = _model()
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss),
                        oc.sgd_update(loss, learning_rate=0.1, momentum=0.5)])
    for _ in range(300):
        step()
    # the least-squares solution of the data
    A = np.hstack([X, np.ones((N, 1))])
    sol = np.linalg.lstsq(A, Y, rcond=None)[0]
    np.testing.assert_allclose(ctx.get(w)[0], sol[:2], atol=1e-6)
    np.testing.assert_allclose(ctx.get(b), sol[2:], atol=1e-6)


def test_learning_rate_number_tensor() -> None:
    w, b, loss = _model()
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss),
                        oc.sgd_update(loss, learning_rate=oc.number(0.05), momentum=0.9)])
    for _ in range(4):
        step()
    ref_w, ref_b, _ = _np_sgd(4, 0.05, 0.9, 0.0, False)
    np.testing.assert_allclose(ctx.get(w), ref_w, rtol=1e-12)
    np.testing.assert_allclose(ctx.get(b), ref_b, rtol=1e-12)


def test_learning_rate_term_schedule() -> None:
    # a learning-rate tensor whose value the caller sets before each step
    w, b, loss = _model()
    # rows spelled out: with batch/input left open, compiling raises a spurious ShapeError
    # (see the report)
    lr = oc.term("lr", batch_dims=[], input_dims=[], output_dims=[1])
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss),
                        oc.sgd_update(loss, learning_rate=lr, momentum=0.5, weight_decay=0.01)])
    schedule = [0.1, 0.08, 0.05, 0.02, 0.01]
    for rate in schedule:
        ctx.set(lr, np.array([rate]))
        step()
    ref_w, ref_b, _ = _np_sgd(len(schedule), schedule, 0.5, 0.01, False)
    np.testing.assert_allclose(ctx.get(w), ref_w, rtol=1e-12)
    np.testing.assert_allclose(ctx.get(b), ref_b, rtol=1e-12)


def test_learning_rate_term_unset_raises() -> None:
    _w, _b, loss = _model()
    lr = oc.term("lr", batch_dims=[], input_dims=[], output_dims=[1])
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=lr)])
    with pytest.raises(oc.RuntimeDataError):
        step()


def test_two_contexts_train_independently() -> None:
    w, _b, loss = _model()
    code = [oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.05, momentum=0.9)]
    c1, c2 = oc.Context(precision="float64"), oc.Context(precision="float64")
    s1, s2 = c1.compile(code), c2.compile(code)
    for _ in range(3):
        s1()
    s2()
    np.testing.assert_allclose(c1.get(w), _np_sgd(3, 0.05, 0.9, 0.0, False)[0], rtol=1e-12)
    np.testing.assert_allclose(c2.get(w), _np_sgd(1, 0.05, 0.9, 0.0, False)[0], rtol=1e-12)


def test_sgd_update_covers_every_param() -> None:
    # three params, one only through a nonlinearity: all of them move as NumPy says
    a0, c0 = np.array([0.3, -0.2]), np.array([0.7])
    a = oc.param("a", init=a0.copy())
    c = oc.param("c", init=c0.copy())
    t = oc.ndarray(np.array([1.0, -1.0]))
    loss = oc.einsum("i=>", (oc.tanh(a * c) - t) * (oc.tanh(a * c) - t))
    ctx = oc.Context(precision="float64")
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.2)])
    step()
    h = np.tanh(a0 * c0)
    dh = 2 * (h - np.array([1.0, -1.0])) * (1 - h * h)
    np.testing.assert_allclose(ctx.get(a), a0 - 0.2 * dh * c0, rtol=1e-12)
    np.testing.assert_allclose(ctx.get(c), c0 - 0.2 * np.array([(dh * a0).sum()]), rtol=1e-12)


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_sgd_without_delta_has_the_bits_of_ocannls_sgd_one(momentum: float,
                                                           precision: str) -> None:
    """Without weight decay or Nesterov, `sgd_update` skips OCANNL's `sgd_delta` copy: the
    same parameters, bit for bit, as OCANNL's `sgd_one` step by step."""
    from ocannl_ast.naming import state_code
    from ocannl_ast.tensor.node import concat
    from ocannl_ast.tensor.train import sgd_one

    def train(direct: bool) -> list[np.ndarray]:
        w, b, loss = _model()
        if direct:
            update = oc.sgd_update(loss, learning_rate=0.05, momentum=momentum)
        else:
            update = concat(state_code(p, sgd_one, p, 0.05, momentum=momentum)
                               for p in (w, b))
        ctx = oc.Context(precision=precision)
        step = ctx.compile([oc.grad_update(loss), update])
        for _ in range(5):
            step()
        return [ctx.get(w), ctx.get(b)]

    for a, c in zip(train(True), train(False), strict=True):
        assert np.array_equal(a, c)
    assert not np.array_equal(train(True)[0], W0)
