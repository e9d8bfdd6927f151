"""A tensor's forward code computes everything it depends on, also what another consumer
embedded first (OCANNL puts a child's code in its first consumer only): a second consumer
built before the loss must not leave the training step reading a stale or missing value.
Found by a user-side check: a prediction built (and evaluated) before the loss made every
step reuse the first forward pass -- the loss never moved."""

from __future__ import annotations

import numpy as np

import ocannl_ast as oc


def _train(pred_first: bool, eval_first: bool, together: bool = False
           ) -> tuple[list[float], list[np.ndarray]]:
    rng = np.random.default_rng(0)
    x = oc.ndarray(rng.normal(size=(8, 3)), batch_axes=1)
    t = oc.ndarray(rng.normal(size=(8, 1)), batch_axes=1)
    w = oc.param("w", init=rng.normal(size=(1, 3)))
    b = oc.param("b", init=np.zeros(1))
    out = oc.einsum("b|i;o,i=>b|o", x, w) + b
    pred = oc.tanh(out) if pred_first else None
    loss = oc.einsum("b|o=>", (out - t) * (out - t)) * (1.0 / 8)
    if pred is None:
        pred = oc.tanh(out)
    ctx = oc.Context(precision="float64")
    code = [oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.1)]
    step = ctx.compile([pred.forward, *code] if together else code)
    if eval_first:
        ctx.eval(pred)
    losses = []
    for _ in range(4):
        step()
        losses.append(float(ctx.get(loss).reshape(-1)[0]))
    return losses, [ctx.get(w), ctx.get(b)]


def _numpy_losses() -> list[float]:
    rng = np.random.default_rng(0)
    x, t = rng.normal(size=(8, 3)), rng.normal(size=(8, 1))
    w, b = rng.normal(size=(1, 3)), np.zeros(1)
    out = []
    for _ in range(4):
        r = x @ w.T + b - t
        out.append(float((r * r).sum() / 8))
        g = 2 * r / 8
        w, b = w - 0.1 * (g.T @ x), b - 0.1 * g.sum(0)
    return out


def test_a_consumer_built_and_evaluated_before_the_loss_leaves_training_intact() -> None:
    want = _numpy_losses()
    for pred_first in (False, True):
        for eval_first in (False, True):
            losses, _ = _train(pred_first, eval_first)
            np.testing.assert_allclose(losses, want, rtol=1e-12)
    assert want[-1] < want[0] * 0.9  # (the loss moves: a stale forward would keep it)


def test_the_other_consumer_in_the_same_routine_computes_the_same() -> None:
    base, params = _train(True, False)
    both, params2 = _train(True, False, together=True)
    assert base == both
    for p, q in zip(params, params2, strict=True):
        np.testing.assert_array_equal(p, q)


def test_a_forward_alone_computes_a_child_another_consumer_embedded() -> None:
    x = oc.ndarray(np.array([-1.0, 2.0, 3.0]))
    y = oc.relu(x)
    _ = y * 2.0  # embeds y's code first
    total = oc.einsum("i=>", y)
    ctx = oc.Context(precision="float64")
    ctx.compile(total.forward)()
    assert float(ctx.get(total).reshape(-1)[0]) == 5.0


def test_setting_a_constant_fill_is_an_error_not_a_value_silently_dropped() -> None:
    """Every routine reading a constant fill computes it again: a value set by hand was
    shown by ctx.get, then silently overwritten by the next run."""
    cf = oc.constant_fill([1.0, 2.0])
    ctx = oc.Context(precision="float64")
    try:
        ctx.set(cf, np.array([5.0, 6.0]))
    except oc.RuntimeDataError as e:
        assert "use a param, oc.term or oc.ndarray" in str(e)
        assert "test_forward_recompute.py" in str(e)
    else:
        raise AssertionError("ctx.set of a constant fill was accepted")
    np.testing.assert_array_equal(ctx.eval(cf * 2.0), [2.0, 4.0])
