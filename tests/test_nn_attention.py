"""oc.nn.multi_head_attention from the user's side: values vs a NumPy reference (with the
layer's own param values read back with ctx.get), causal masking, gradients w.r.t. the
input (oc.testing.check_grads) and w.r.t. the params (vs float64 central differences of the
NumPy reference), and argument errors."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def _np_mha(xs: np.ndarray, wq: np.ndarray, wk: np.ndarray, wv: np.ndarray,
            wo: np.ndarray, causal: bool) -> np.ndarray:
    """x: (..., S, F); wq/wk/wv: (H, D, F); wo: (F, H, D)."""
    q, k, v = (np.einsum("...sf,hdf->...shd", xs, w) for w in (wq, wk, wv))
    scores = np.einsum("...shd,...thd->...hst", q, k) / np.sqrt(wq.shape[1])
    s = xs.shape[-2]
    if causal:
        scores = np.where(np.tril(np.ones((s, s))) > 0, scores, -np.inf)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    weights = e / e.sum(-1, keepdims=True)
    return np.einsum("...shd,fhd->...sf", np.einsum("...hst,...thd->...shd", weights, v), wo)


def _params(ctx: oc.Context, y: oc.Tensor) -> dict[str, np.ndarray]:
    return {p.label: ctx.get(p) for p in y.params()}


def _ref(ctx: oc.Context, y: oc.Tensor, xs: np.ndarray, causal: bool) -> np.ndarray:
    ps = _params(ctx, y)
    return _np_mha(xs, ps["wq"], ps["wk"], ps["wv"], ps["wo"], causal)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [1, 2, 3, 4, 5])
def test_mha_matches_numpy(seq: int, causal: bool) -> None:
    xs = np.random.default_rng(seq).normal(size=(2, seq, 6))
    y = oc.nn.multi_head_attention(2, 3, causal=causal)(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    oc.testing.assert_shape(y, f"2|{seq},6")
    shapes = {p.label: str(p.shape) for p in y.params()}
    assert shapes == {"wq": "6->2,3", "wk": "6->2,3", "wv": "6->2,3", "wo": "2,3->6"}
    np.testing.assert_allclose(got, _ref(ctx, y, xs, causal), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("heads,dim,batch", [(1, 4, (3,)), (4, 2, (2, 2)), (3, 1, ())])
def test_mha_head_layouts_and_batch_axes(heads: int, dim: int, batch: tuple[int, ...]) -> None:
    xs = np.random.default_rng(heads).normal(size=(*batch, 4, 5))
    y = oc.nn.multi_head_attention(heads, dim, causal=True)(
        oc.ndarray(xs, batch_axes=len(batch)))
    ctx = oc.Context(precision="float64")
    np.testing.assert_allclose(ctx.eval(y), _ref(ctx, y, xs, True), rtol=1e-10, atol=1e-12)


def test_mha_float32_large_scores_stay_finite() -> None:
    xs = np.random.default_rng(7).normal(size=(2, 5, 4)) * 30.0
    y = oc.nn.multi_head_attention(2, 4, causal=True)(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context()
    got = ctx.eval(y)
    ps = _params(ctx, y)
    assert np.all(np.isfinite(got))
    ref = _np_mha(xs, *(ps[k].astype(np.float64) for k in ("wq", "wk", "wv", "wo")), True)
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3 * np.abs(ref).max())


def test_mha_causal_output_ignores_future_positions() -> None:
    rng = np.random.default_rng(8)
    xs = rng.normal(size=(1, 5, 4))
    xs2 = xs.copy()
    xs2[:, 3:] = rng.normal(size=(1, 2, 4)) * 5.0
    layer = oc.nn.multi_head_attention(2, 2, causal=True)
    y1, y2 = layer(oc.ndarray(xs, batch_axes=1)), layer(oc.ndarray(xs2, batch_axes=1))
    ctx = oc.Context(precision="float64")
    a, b = ctx.eval(y1), ctx.eval(y2)
    np.testing.assert_allclose(a[:, :3], b[:, :3], rtol=1e-12, atol=1e-14)
    assert np.abs(a[:, 3:] - b[:, 3:]).max() > 1e-3
    # the first position only sees itself: its output is v(x_0) projected, whatever follows
    ps = _params(ctx, y1)
    v0 = np.einsum("f,hdf->hd", xs[0, 0], ps["wv"])
    np.testing.assert_allclose(a[0, 0], np.einsum("hd,fhd->f", v0, ps["wo"]), rtol=1e-10)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("seq", [1, 3, 5])
def test_mha_grads_wrt_input(seq: int, causal: bool) -> None:
    w = oc.ndarray(np.random.default_rng(9).normal(size=(seq, 4)))
    layer = oc.nn.multi_head_attention(2, 3, causal=causal)
    oc.testing.check_grads(lambda x: oc.einsum("s,f;s,f=>", layer(x), w),
                           [np.random.default_rng(seq).normal(size=(seq, 4))],
                           rtol=1e-4, atol=1e-7)


def _numeric(f, a: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    out = np.zeros_like(a)
    for idx in np.ndindex(*a.shape):
        hi, lo = a.copy(), a.copy()
        hi[idx] += eps
        lo[idx] -= eps
        out[idx] = (f(hi) - f(lo)) / (2 * eps)
    return out


@pytest.mark.parametrize("causal", [False, True])
def test_mha_grads_wrt_params_match_central_differences(causal: bool) -> None:
    rng = np.random.default_rng(10)
    xs, ws = rng.normal(size=(2, 4, 3)), rng.normal(size=(2, 4, 3))
    y = oc.nn.multi_head_attention(2, 2, causal=causal)(oc.ndarray(xs, batch_axes=1))
    loss = oc.einsum("b|s,f;b|s,f=>", y, oc.ndarray(ws, batch_axes=1))
    ctx = oc.Context(precision="float64")
    ps = y.params()
    value, grads = oc.value_and_grad(loss, ps, ctx=ctx)
    vals = {p.label: ctx.get(p) for p in ps}

    def ref_loss(name: str, a: np.ndarray) -> float:
        kw = {**vals, name: a}
        out = _np_mha(xs, kw["wq"], kw["wk"], kw["wv"], kw["wo"], causal)
        return float(np.sum(out * ws))

    np.testing.assert_allclose(value.reshape(()), ref_loss("wq", vals["wq"]), rtol=1e-12)
    for p, g in zip(ps, grads, strict=True):
        assert np.all(np.isfinite(g))
        num = _numeric(lambda a, n=p.label: ref_loss(n, a), vals[p.label])
        np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-7, err_msg=p.label)


def test_mha_trains_with_adam() -> None:
    rng = np.random.default_rng(11)
    xs = rng.normal(size=(4, 5, 3))
    target = np.cumsum(xs, axis=1) / np.arange(1, 6)[None, :, None]  # causal running mean
    layer = oc.nn.multi_head_attention(2, 3, causal=True)
    loss = oc.nn.mse(layer(oc.ndarray(xs, batch_axes=1)), oc.ndarray(target, batch_axes=1))
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.03)])
    losses = []
    for _ in range(80):
        step()
        losses.append(float(ctx.get(loss).reshape(())))
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0], losses[::10]


@pytest.mark.parametrize("args,kwargs,match", [
    ((0, 2), {}, "num_heads"), ((2, -1), {}, "head_dim"), ((2.0, 2), {}, "num_heads"),
    ((2, 2), {"causal": 1}, "causal"),
])
def test_mha_rejects_bad_arguments(args, kwargs, match) -> None:
    with pytest.raises(oc.OcannlError, match=match):
        oc.nn.multi_head_attention(*args, **kwargs)


def test_mha_causal_float32_grads_have_no_nan_or_inf() -> None:
    """Masked scores (-1e9) must not leak NaN/inf into any gradient, even with large
    activations in float32."""
    rng = np.random.default_rng(12)
    xs, ws = rng.normal(size=(3, 5, 4)) * 20.0, rng.normal(size=(3, 5, 4))
    y = oc.nn.multi_head_attention(2, 3, causal=True)(oc.ndarray(xs, batch_axes=1))
    loss = oc.einsum("b|s,f;b|s,f=>", y, oc.ndarray(ws, batch_axes=1))
    ctx = oc.Context()
    value, grads = oc.value_and_grad(loss, y.params(), ctx=ctx)
    assert np.all(np.isfinite(value))
    for g in grads:
        assert np.all(np.isfinite(g)) and np.abs(g).max() > 0
