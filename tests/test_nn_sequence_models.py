"""oc.nn on sequences from the user's side (issue 20, item 1): `linear` and `mlp` act on the
last output axis only, as torch.nn.Linear; a causal LM built only from oc.nn layers is
causal (changing token t changes no output before t); its parameter count is torch's; its
first loss is near ln(vocab) under the default (PyTorch) init; `flatten` is numpy's reshape
with an un-flattening gradient."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ocannl_ast as oc

VOCAB, D, HEADS, SEQ, BATCH = 11, 8, 2, 6, 2


def _lm(vocab: int = VOCAB, d: int = D, heads: int = HEADS):
    """A one-block pre-norm transformer LM from oc.nn only (no positions: not needed here)."""
    emb = oc.nn.embedding(vocab, d)
    attn = oc.nn.multi_head_attention(heads, d // heads, causal=True)
    ln1, ln2, ln_f = oc.nn.layer_norm(), oc.nn.layer_norm(), oc.nn.layer_norm()
    mlp = oc.nn.mlp([4 * d, d], activation=oc.nn.gelu)
    head = oc.nn.linear(vocab)

    def model(ids: oc.Tensor) -> oc.Tensor:
        x = emb(ids)
        x = x + attn(ln1(x))
        x = x + mlp(ln2(x))
        return head(ln_f(x))

    return model


def _ids(seed: int, vocab: int = VOCAB) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, vocab, size=(BATCH, SEQ)).astype(float)


def test_linear_on_a_sequence_is_torch_linear_per_position() -> None:
    torch = pytest.importorskip("torch", reason="torch is the oracle of this test")
    xs = np.random.default_rng(0).normal(size=(2, 5, 6))
    y = oc.nn.linear(4)(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    oc.testing.assert_shape(y, "2|5,4")
    w, b = y.params()
    assert (str(w.shape), str(b.shape)) == ("6->4", "4")
    lin = torch.nn.Linear(6, 4).double()
    with torch.no_grad():
        lin.weight.copy_(torch.from_numpy(ctx.get(w)))
        lin.bias.copy_(torch.from_numpy(ctx.get(b)))
        want = lin(torch.from_numpy(xs)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_linear_without_bias_and_mlp_position_wise() -> None:
    xs = np.random.default_rng(1).normal(size=(3, 4, 5))
    y = oc.nn.linear(2, bias=False)(oc.ndarray(xs, batch_axes=1))
    ctx = oc.Context(precision="float64")
    (w,) = y.params()
    np.testing.assert_allclose(ctx.eval(y), xs @ ctx.get(w).T, rtol=1e-12)
    m = oc.nn.mlp([7, 3])(oc.ndarray(xs, batch_axes=1))
    oc.testing.assert_shape(m, "3|4,3")
    assert sorted(str(p.shape) for p in m.params()) == ["3", "5->7", "7", "7->3"]
    with pytest.raises(oc.ArgumentError, match="bias must be a bool"):
        oc.nn.linear(2, bias=1)


def test_linear_gradients_on_a_sequence() -> None:
    xs = np.random.default_rng(2).normal(size=(2, 3, 4))
    layer = oc.nn.linear(3)
    # x: one sequence s,f (a param of check_grads); the loss sums the squared outputs
    oc.testing.check_grads(lambda x: oc.einsum("s,o => 0", layer(x) * layer(x)), [xs[0]])


def test_causal_lm_changing_token_t_changes_nothing_before_t() -> None:
    ids = oc.term("ids", batch_dims=[BATCH], output_dims=[SEQ])
    logits = _lm()(ids)
    ctx = oc.Context()
    base = _ids(3)
    ctx.set(ids, base)
    before = ctx.eval(logits)
    assert before.shape == (BATCH, SEQ, VOCAB)
    for t in range(SEQ):
        changed = base.copy()
        changed[:, t] = (changed[:, t] + 1 + t) % VOCAB
        ctx.set(ids, changed)
        after = ctx.eval(logits)
        np.testing.assert_array_equal(after[:, :t], before[:, :t])
        assert np.abs(after[:, t] - before[:, t]).max() > 1e-4  # token t itself matters


def test_causal_lm_parameter_count_matches_torch() -> None:
    torch = pytest.importorskip("torch", reason="torch counts the reference parameters")
    ids = oc.ndarray(_ids(4), batch_axes=1)
    logits = _lm()(ids)
    oc.infer_shapes(logits)
    ours = sum(math.prod(p.dims()) for p in logits.params())
    nn = torch.nn
    ref = nn.ModuleList([
        nn.Embedding(VOCAB, D),
        nn.MultiheadAttention(D, HEADS, bias=False),
        nn.LayerNorm(D), nn.LayerNorm(D), nn.LayerNorm(D),
        nn.Linear(D, 4 * D), nn.Linear(4 * D, D),
        nn.Linear(D, VOCAB),
    ])
    assert ours == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fresh_lm_first_loss_is_near_ln_vocab(seed: int) -> None:
    vocab = 65
    oc.set_seed(seed)
    try:
        rng = np.random.default_rng(seed)
        ids = oc.ndarray(rng.integers(0, vocab, size=(4, 16)).astype(float), batch_axes=1)
        targets = oc.ndarray(np.eye(vocab)[rng.integers(0, vocab, size=(4, 16))], batch_axes=1)
        loss = oc.nn.cross_entropy(_lm(vocab, 32, 4)(ids), targets)
        first = float(oc.Context().eval(loss).reshape(-1)[0])
    finally:
        oc.set_seed(0)
    assert abs(first - math.log(vocab)) < 0.5, first


@pytest.mark.parametrize("dims", [(3, 4, 5), (2, 7), (6,)])
def test_flatten_is_numpy_reshape(dims: tuple[int, ...]) -> None:
    xs = np.random.default_rng(5).normal(size=(2, *dims))
    y = oc.nn.flatten(oc.ndarray(xs, batch_axes=1))
    oc.testing.assert_shape(y, f"2|{math.prod(dims)}")
    np.testing.assert_array_equal(oc.Context(precision="float64").eval(y), xs.reshape(2, -1))


def test_flatten_gradient_unflattens() -> None:
    xs = np.random.default_rng(6).normal(size=(3, 2, 4))
    weights = oc.ndarray(np.arange(1.0, 25.0))
    oc.testing.check_grads(lambda x: oc.einsum("i; i => 0", oc.nn.flatten(x * x), weights),
                           [xs])


def test_flatten_before_a_dense_head() -> None:
    img = np.random.default_rng(7).normal(size=(2, 4, 4, 3))
    feats = oc.nn.max_pool2d(2)(oc.nn.conv2d(5, 3)(oc.ndarray(img, batch_axes=1)))
    logits = oc.nn.linear(10)(oc.nn.flatten(feats))
    ctx = oc.Context(precision="float64")
    got = ctx.eval(logits)
    w = next(p for p in logits.params() if p.name.endswith("linear.w") or p.label == "w")
    assert str(w.shape) == "20->10"
    np.testing.assert_allclose(got, ctx.eval(feats).reshape(2, 20) @ ctx.get(w).T
                               + ctx.get(logits.params()[-1]), rtol=1e-12)


def test_flatten_needs_known_output_dims() -> None:
    x = oc.term("x_unknown")
    with pytest.raises(oc.ShapeError, match="flatten: the output dims of 'x_unknown'"):
        oc.nn.flatten(x)
    with pytest.raises(oc.ArgumentError, match="flatten: x must be an oc.Tensor"):
        oc.nn.flatten(np.zeros(3))


def _linear_ref(ctx: oc.Context, logits: oc.Tensor, flat: np.ndarray) -> np.ndarray:
    """NumPy's `flat @ w.T + b` with the values of the linear layer that made `logits`."""
    w, b = (next(p for p in logits.params() if p.label == n) for n in "wb")
    return flat @ ctx.get(w).T + ctx.get(b)


@pytest.mark.parametrize("shape", [(3, 2, 1, 2), (3, 3, 1, 2), (3, 1, 1, 2), (3, 1, 3, 2),
                                   (3, 1, 1, 1), (1, 1, 1, 5), (2, 1, 2, 1, 3)])
def test_flatten_with_a_leading_size_1_axis_then_linear(shape: tuple[int, ...]) -> None:
    """A first output axis of size 1 before two or more others (B|1,1,C after a global
    pooling, B|1,W,C) left the flattened size unsolved (`2*?h<+1*2`), and the linear built
    on it failed ("parameter 'w': a dimension is not determined by any use"). Built without
    evaluating the flattened tensor first; values as NumPy's reshape and matmul."""
    xs = np.random.default_rng(8).normal(size=shape)
    flat = oc.nn.flatten(oc.ndarray(xs, batch_axes=1))
    logits = oc.nn.linear(4)(flat)
    ctx = oc.Context(precision="float64")
    got = ctx.eval(logits)
    want_flat = xs.reshape(shape[0], -1)
    oc.testing.assert_shape(flat, f"{shape[0]}|{want_flat.shape[1]}")
    np.testing.assert_array_equal(ctx.eval(flat), want_flat)
    np.testing.assert_allclose(got, _linear_ref(ctx, logits, want_flat), rtol=1e-12)


def test_global_average_pool_head_matches_numpy() -> None:
    """conv -> avg_pool2d over the whole image (B|1,1,C) -> flatten (B|C) -> linear."""
    img = np.random.default_rng(9).normal(size=(3, 4, 4, 2))
    conv = oc.nn.conv2d(6, 3, padding="valid")
    feats = conv(oc.ndarray(img, batch_axes=1))  # 3|2,2,6
    flat = oc.nn.flatten(oc.nn.avg_pool2d(2)(feats))  # 3|1,1,6 -> 3|6
    logits = oc.nn.linear(5)(flat)
    ctx = oc.Context(precision="float64")
    got = ctx.eval(logits)
    assert got.shape == (3, 5)
    kernel, bias = (next(p for p in logits.params() if p.label == n)
                    for n in ("kernel", "bias"))
    wk = ctx.get(kernel)  # (out_ch, kh, kw, in_ch)
    conv_ref = np.stack([np.stack([np.einsum("bxyc,oxyc->bo", img[:, i:i + 3, j:j + 3], wk)
                                   for j in range(2)], axis=1) for i in range(2)], axis=1)
    conv_ref = conv_ref + ctx.get(bias)
    np.testing.assert_allclose(ctx.eval(feats), conv_ref, rtol=1e-12)
    pooled = conv_ref.mean(axis=(1, 2))
    np.testing.assert_allclose(ctx.eval(flat), pooled, rtol=1e-12)
    np.testing.assert_allclose(got, _linear_ref(ctx, logits, pooled), rtol=1e-12)


def test_flatten_of_a_1xw_conv_then_linear_matches_numpy() -> None:
    """A 1-D signal as a 1 x W image: conv (1, 3) gives B|1,W',C, flattened to B|W'*C."""
    sig = np.random.default_rng(10).normal(size=(3, 1, 13, 1))
    feats = oc.nn.conv2d(4, (1, 3), padding="valid")(oc.ndarray(sig, batch_axes=1))
    flat = oc.nn.flatten(feats)
    logits = oc.nn.linear(5)(flat)
    ctx = oc.Context(precision="float64")
    got = ctx.eval(logits)
    assert got.shape == (3, 5)
    f = ctx.eval(feats)
    assert f.shape == (3, 1, 11, 4)
    np.testing.assert_array_equal(ctx.eval(flat), f.reshape(3, 44))
    np.testing.assert_allclose(got, _linear_ref(ctx, logits, f.reshape(3, 44)), rtol=1e-12)
