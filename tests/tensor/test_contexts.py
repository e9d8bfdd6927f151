"""Contexts: `oc.eval` / `ctx.eval` / `oc.value_and_grad` see a context's current (trained)
params, the default context never re-initializes, fresh contexts initialize
deterministically; tensors written by @cd code are readable afterwards; routines, first-run
initialization and get/set/eval are thread-safe. Oracle: NumPy."""

# @cd bodies declare names inline ({z}) and use named indices (s[i]).
# ruff: noqa: F821

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest

import ocannl_ast as oc

XS = np.array([[0.5, -1.0], [1.5, 2.0], [-0.5, 0.25], [1.0, 1.0]])
YS = np.array([1.0, -1.0, 0.5, 2.0])


def _model() -> tuple[oc.Tensor, oc.Tensor, oc.Tensor, oc.Tensor]:
    """A linear model over a fixed batch: returns (prediction, loss, w, b)."""
    w = oc.param("w", output_dims=[1], input_dims=[2])
    b = oc.param("b", output_dims=[1])
    x = oc.ndarray(XS, batch_axes=1)
    pred = w @ x + b
    d = pred - oc.ndarray(YS.reshape(4, 1), batch_axes=1)
    loss = oc.einsum("b|i;b|i=>", d, d)
    return pred, loss, w, b


def _train(ctx: oc.Context, loss: oc.Tensor, steps: int) -> None:
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.02)])
    for _ in range(steps):
        step()


def _np_pred(w: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (XS @ w.reshape(1, 2).T + b.reshape(1, 1)).reshape(4, 1)


# ---- trained params and eval ----------------------------------------------------------------

def test_eval_after_training_sees_trained_weights() -> None:
    pred, loss, w, b = _model()
    ctx = oc.Context()
    _train(ctx, loss, 30)
    wt, bt = ctx.get(w), ctx.get(b)
    expected = _np_pred(wt, bt)
    # float32 predictions of order 1: a prediction near 0 needs an absolute tolerance
    np.testing.assert_allclose(ctx.eval(pred), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(oc.eval(pred, ctx=ctx), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(ctx.get(w), wt)  # evaluation did not touch the weights
    fresh = oc.Context()
    assert not np.allclose(fresh.eval(pred), expected)  # a fresh context: initial weights


def test_training_reduces_loss_seen_by_value_and_grad() -> None:
    _, loss, w, _ = _model()
    ctx = oc.Context()
    before, _ = oc.value_and_grad(loss, [w], ctx=ctx)
    _train(ctx, loss, 50)
    after, (gw,) = oc.value_and_grad(loss, [w], ctx=ctx)
    # the least-squares optimum bounds the loss from below; training halves the gap
    design = np.hstack([XS, np.ones((4, 1))])
    best = float(np.sum((design @ np.linalg.lstsq(design, YS, rcond=None)[0] - YS) ** 2))
    assert best - 1e-4 <= float(after) < best + 0.5 * (float(before) - best)
    assert gw.shape == (1, 2)


def test_default_context_keeps_params_across_calls() -> None:
    pred, loss, w, _ = _model()
    a = oc.eval(pred)
    w0 = oc.default_context().get(w)
    b = oc.eval(pred)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(oc.eval(w), w0)
    assert oc.default_context() is oc.default_context("c")
    # training in the default context is what the next oc.eval sees
    _train(oc.default_context(), loss, 5)
    trained = oc.default_context().get(w)
    assert not np.array_equal(trained, w0)
    np.testing.assert_array_equal(oc.eval(w), trained)


def test_default_context_per_precision() -> None:
    p = oc.param("p", output_dims=[3])
    a32 = oc.eval(p * 1.0)
    a64 = oc.eval(p * 1.0, precision="float64")
    assert a32.dtype == np.float32 and a64.dtype == np.float64
    # seed 001's unpack is precision-dependent (4 uniforms per word in float32, 2 in
    # float64): each precision's stream is its own, both the NumPy reference's
    from ocannl_ast.tensor.seed import _seed
    from ocannl_ast.tensor.random_init import reference_values
    assert p.init_key is not None
    np.testing.assert_array_equal(a32, reference_values(p.init_key, _seed[0], (3,), "float32"))
    np.testing.assert_array_equal(a64, reference_values(p.init_key, _seed[0], (3,), "float64"))
    assert oc.default_context(precision="float64").precision.value == "float64"


def test_eval_precision_conflicting_with_ctx_is_an_error() -> None:
    p = oc.param("p", output_dims=[2], init=1.0)
    with pytest.raises(oc.OcannlError, match="precision"):
        oc.eval(p, ctx=oc.Context(), precision="float64")


def test_fresh_contexts_initialize_deterministically() -> None:
    pred, _, w, b = _model()
    c1, c2 = oc.Context(), oc.Context()
    np.testing.assert_array_equal(c1.eval(pred), c2.eval(pred))
    np.testing.assert_array_equal(c1.get(w), c2.get(w))
    w0 = c1.get(w)
    assert np.abs(w0).max() <= 1.0 and not np.array_equal(w0, np.zeros_like(w0))
    np.testing.assert_allclose(c1.eval(pred), _np_pred(w0, c1.get(b)), rtol=1e-5)


def test_ctx_set_param_then_eval_uses_it() -> None:
    pred, _, w, b = _model()
    ctx = oc.Context()
    ctx.set(w, np.array([[2.0, -1.0]]))
    ctx.set(b, np.array([0.5]))
    np.testing.assert_allclose(ctx.eval(pred), _np_pred(np.array([2.0, -1.0]),
                                                       np.array([0.5])), rtol=1e-6)


def test_value_and_grad_of_unrelated_tensor_is_zero() -> None:
    _, loss, w, _ = _model()
    other = oc.param("other", output_dims=[3], init=1.0)
    _, (gw, go) = oc.value_and_grad(loss, [w, other], ctx=oc.Context())
    np.testing.assert_array_equal(go, np.zeros(3))
    assert gw.shape == (1, 2)


# ---- tensors written by @cd code ------------------------------------------------------------

def test_term_written_by_cd_code_is_readable() -> None:
    x = oc.ndarray([1.0, 2.0, 3.0])
    y = oc.term("y", output_dims=[3])
    declared: list[oc.Tensor] = []

    @oc.cd
    def fill(y, x):
        y[...] = x * 2.0
        {z}[...] = x + 1.0
        declared.append(z)

    ctx = oc.Context()
    ctx.compile(fill(y, x))()
    np.testing.assert_array_equal(ctx.get(y), [2.0, 4.0, 6.0])
    np.testing.assert_array_equal(ctx.get(declared[0]), [2.0, 3.0, 4.0])
    np.testing.assert_array_equal(ctx.eval(y * 1.0), [2.0, 4.0, 6.0])


def test_term_written_by_reduction_is_readable() -> None:
    x = oc.ndarray([[1.0, 2.0], [3.0, 4.0]])
    s = oc.term("s", output_dims=[2])

    @oc.cd
    def rowsum(s, x):
        s[i] = sum[j](x[i, j])

    ctx = oc.Context()
    ctx.compile(rowsum(s, x))()
    np.testing.assert_array_equal(ctx.get(s), [3.0, 7.0])


def test_term_written_at_a_batch_index_is_readable() -> None:
    data = oc.ndarray(np.arange(6.0).reshape(3, 2), batch_axes=1)
    row = oc.term("row", output_dims=[2])
    i = oc.static_index("i")

    @oc.cd
    def pick(row, data):
        row[...] = data.batch_slice(i)

    ctx = oc.Context()
    r = ctx.compile(pick(row, data))
    r(i=2)
    np.testing.assert_array_equal(ctx.get(row), [4.0, 5.0])
    r(i=0)
    np.testing.assert_array_equal(ctx.get(row), [0.0, 1.0])


def test_term_accumulated_without_a_value_is_an_error() -> None:
    x = oc.ndarray([1.0, 2.0])
    acc = oc.term("acc", output_dims=[2])

    @oc.cd
    def add_to(acc, x):
        acc += x

    ctx = oc.Context()
    r = ctx.compile(add_to(acc, x))
    with pytest.raises(oc.RuntimeDataError, match="acc"):
        r()
    ctx.set(acc, [10.0, 20.0])
    r()
    r()
    np.testing.assert_array_equal(ctx.get(acc), [12.0, 24.0])


def test_param_initialized_from_unset_term_is_an_error() -> None:
    t = oc.term("t", output_dims=[2])
    p = oc.param("p", init=t * 2.0)
    ctx = oc.Context()
    with pytest.raises(oc.RuntimeDataError, match="'t'"):
        ctx.eval(p * 1.0)
    ctx.set(t, [1.0, 2.0])
    np.testing.assert_array_equal(ctx.eval(p * 1.0), [2.0, 4.0])


def test_unwritten_term_read_by_code_is_an_error() -> None:
    t = oc.term("t", output_dims=[2])
    with pytest.raises(oc.RuntimeDataError, match="t"):
        oc.Context().eval(t + 1.0)


# ---- threads ----------------------------------------------------------------------------------

def _race(n: int, fn: Callable[[int], None]) -> None:
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            barrier.wait()
            fn(k)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def test_threads_racing_first_call_initialize_once() -> None:
    _, loss, w, b = _model()
    ref = oc.Context()
    ref_step = ref.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.02)])
    for _ in range(8):
        ref_step()
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.02)])
    _race(8, lambda k: step())
    # 8 serialized steps from one initialization, exactly as single-threaded
    np.testing.assert_array_equal(ctx.get(w), ref.get(w))
    np.testing.assert_array_equal(ctx.get(b), ref.get(b))


def test_threads_racing_eval_and_get_on_default_context() -> None:
    pred, _, w, _ = _model()
    results: dict[int, np.ndarray] = {}
    weights: dict[int, np.ndarray] = {}

    def work(k: int) -> None:
        results[k] = oc.eval(pred)
        weights[k] = oc.default_context().get(w)

    _race(8, work)
    for k in range(1, 8):
        np.testing.assert_array_equal(results[k], results[0])
        np.testing.assert_array_equal(weights[k], weights[0])


def _big_model() -> tuple[oc.Tensor, oc.Tensor]:
    """Enough work per step (a 128x128 layer over 128 examples) that unserialized steps
    running in parallel would interleave."""
    rng = np.random.default_rng(5)
    w = oc.param("w", output_dims=[128], input_dims=[128])
    x = oc.ndarray(rng.standard_normal((128, 128)), batch_axes=1)
    d = oc.tanh(w @ x) - oc.ndarray(rng.standard_normal((128, 128)), batch_axes=1)
    return oc.einsum("b|i;b|i=>", d, d), w


def test_threads_concurrent_training_steps_serialize() -> None:
    loss, w = _big_model()
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=1e-4)])
    step()
    _race(8, lambda k: [step() for _ in range(3)])
    ref = oc.Context()
    ref_step = ref.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=1e-4)])
    for _ in range(25):
        ref_step()
    np.testing.assert_array_equal(ctx.get(w), ref.get(w))


def test_threads_racing_set_and_get_stay_consistent() -> None:
    n = 1 << 20
    t = oc.term("t", output_dims=[n])
    ctx = oc.Context()
    ctx.set(t, np.zeros(n))

    def work(k: int) -> None:
        for _ in range(6):
            ctx.set(t, np.full(n, float(k)))
            got = ctx.get(t)
            assert got[0] == got[-1] and np.all(got == got[0]), "a torn read"

    _race(8, work)


def test_default_context_creation_is_unique_under_threads() -> None:
    seen: dict[int, oc.Context] = {}
    _race(8, lambda k: seen.__setitem__(k, oc.default_context(precision="float64")))
    assert len({id(c) for c in seen.values()}) == 1
