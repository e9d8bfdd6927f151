"""float32 numerics of oc.nn (issue 20, item 6) from the user's side: layer_norm on a
constant row returns the bias exactly with an exactly zero gain gradient (as PyTorch);
layer_norm, softmax, log_softmax and cross_entropy stay within float32 rounding of a
float64 NumPy reference on rows with a large offset; NaN, infinite, fractional or
out-of-range ids are a RuntimeDataError (always, not only with OCANNL_AST_CHECK=1), wherever
the ids come from."""

from __future__ import annotations

import numpy as np
import pytest

import ocannl_ast as oc


def _layer_norm_grads(xs: np.ndarray, bias: np.ndarray, up: np.ndarray):
    """float32 layer_norm of xs (batch | features): output, d(sum(out * up))/d gain, /d bias."""
    x = oc.ndarray(xs, batch_axes=1)
    out = oc.nn.layer_norm()(x)
    gain, b = out.params()
    loss = oc.einsum("..b..|f; ..b..|f => 0", out, oc.ndarray(up, batch_axes=1))
    ctx = oc.Context()
    ctx.set(b, bias)
    _, (g_gain, g_bias) = oc.value_and_grad(loss, [gain, b], ctx=ctx)
    return ctx.get(out), g_gain, g_bias


@pytest.mark.parametrize("n", [3, 5, 6, 7, 10, 96, 100])
@pytest.mark.parametrize("value", [100.0, -3.7, 1e4])
def test_layer_norm_constant_row_is_exact_in_float32(n: int, value: float) -> None:
    rng = np.random.default_rng(n)
    bias = rng.normal(size=n).astype(np.float32)
    up = rng.normal(size=(2, n))
    out, g_gain, g_bias = _layer_norm_grads(np.full((2, n), value), bias, up)
    np.testing.assert_array_equal(out, np.broadcast_to(bias, (2, n)))
    np.testing.assert_array_equal(g_gain, np.zeros(n, np.float32))
    np.testing.assert_allclose(g_bias, up.astype(np.float32).sum(0), rtol=1e-5, atol=1e-6)


def test_layer_norm_constant_row_matches_torch() -> None:
    torch = pytest.importorskip("torch", reason="torch float32 layer_norm is the oracle")
    n = 7
    bias = np.linspace(-1, 1, n).astype(np.float32)
    up = np.random.default_rng(0).normal(size=(2, n))
    out, g_gain, _ = _layer_norm_grads(np.full((2, n), 100.0), bias, up)
    ln = torch.nn.LayerNorm(n)
    with torch.no_grad():
        ln.bias.copy_(torch.from_numpy(bias))
    y = ln(torch.full((2, n), 100.0))
    (y * torch.from_numpy(up).float()).sum().backward()
    np.testing.assert_array_equal(out, y.detach().numpy())
    # exact here; torch's own float32 gain gradient on this row is within 2e-3 of zero
    np.testing.assert_array_equal(g_gain, np.zeros(n, np.float32))
    np.testing.assert_allclose(ln.weight.grad.numpy(), 0.0, atol=5e-3)


def test_layer_norm_offset_rows_match_float64_reference() -> None:
    xs = 1000.0 + np.random.default_rng(1).normal(size=(4, 24))
    got = oc.Context().eval(oc.nn.layer_norm()(oc.ndarray(xs, batch_axes=1)))
    x32 = xs.astype(np.float32).astype(np.float64)
    c = x32 - x32.mean(-1, keepdims=True)
    want = c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, want, atol=1e-3)


def test_softmax_family_float32_against_float64() -> None:
    xs = 50.0 + 3.0 * np.random.default_rng(2).normal(size=(5, 7))
    targets = np.eye(7)[np.random.default_rng(3).integers(0, 7, size=5)]
    x = oc.ndarray(xs, batch_axes=1)
    ctx = oc.Context()
    sm = ctx.eval(oc.nn.softmax(x))
    lsm = ctx.eval(oc.nn.log_softmax(x))
    ce = ctx.eval(oc.nn.cross_entropy(x, oc.ndarray(targets, batch_axes=1)))
    x32 = xs.astype(np.float32).astype(np.float64)
    z = x32 - x32.max(-1, keepdims=True)
    ref_lsm = z - np.log(np.exp(z).sum(-1, keepdims=True))
    np.testing.assert_allclose(sm, np.exp(ref_lsm), rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(sm.sum(-1), 1.0, rtol=2e-6)
    np.testing.assert_allclose(lsm, ref_lsm, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(ce.reshape(()), -(targets * ref_lsm).sum(-1).mean(), rtol=2e-6)
    # a uniform row: exactly 1/n each (one correctly rounded division)
    even = ctx.eval(oc.nn.softmax(oc.ndarray(np.full((1, 7), 3.0), batch_axes=1)))
    np.testing.assert_array_equal(even, np.full((1, 7), np.float32(1.0) / np.float32(7.0)))


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1.5, -0.25])
def test_bad_ids_set_into_a_term_are_runtime_data_errors(bad: float) -> None:
    ids = oc.term("tok_ids", batch_dims=[2], output_dims=[3])
    logits = oc.nn.linear(4)(oc.nn.embedding(5, 2)(ids))
    ctx = oc.Context()
    ctx.set(ids, np.array([[0.0, 1.0, 2.0], [3.0, 4.0, 0.0]]))
    assert np.isfinite(ctx.eval(logits)).all()
    data = np.array([[0.0, 1.0, 2.0], [3.0, bad, 0.0]])
    with pytest.raises(oc.RuntimeDataError, match=r"'tok_ids' holds integer ids .*cell "
                                                  r"\(1, 1\)") as e:
        ctx.set(ids, data)
    assert "test_nn_numerics.py" in str(e.value)  # the ctx.set line, and the lookup's


def test_nan_target_ids_behind_a_slice_are_caught() -> None:
    """Class targets as ids, sliced per batch from a resident data set: the data set is
    checked when built and when re-set."""
    data = np.array([[[0.0, 2.0]], [[1.0, 1.0]]])   # 2 batches of 1 example, 2 positions
    t_all = oc.ndarray(data, batch_axes=2, label="targets_all")
    batch = oc.static_index("batch")
    targets = oc.nn.one_hot(t_all.batch_slice(batch), 3)
    ctx = oc.Context()
    bad = data.copy()
    bad[1, 0, 1] = np.nan
    with pytest.raises(oc.RuntimeDataError, match="'targets_all' holds integer ids"):
        ctx.set(t_all, bad)
    with pytest.raises(oc.RuntimeDataError, match="nan"):
        oc.nn.one_hot(oc.ndarray(bad, batch_axes=2, label="bad_targets").batch_slice(batch), 3)
    assert targets is not None


def test_fractional_ids_are_errors_without_checks_too(monkeypatch) -> None:
    monkeypatch.setenv("OCANNL_AST_CHECK", "0")
    ids = oc.term("loose_ids", output_dims=[2])
    onehot = oc.nn.one_hot(ids, 3)
    ctx = oc.Context()
    with pytest.raises(oc.RuntimeDataError, match=r"cell \(0,\) is 0.5, not a finite integer"):
        ctx.set(ids, np.array([0.5, 2.0]))
    ctx.set(ids, np.array([1.0, 2.0]))
    np.testing.assert_array_equal(ctx.eval(onehot), [[0, 1, 0], [0, 0, 1]])


@pytest.mark.parametrize("bad", [-1.0, 3.0, 1e6])
def test_ids_out_of_range_are_errors(bad: float) -> None:
    """As torch.nn.functional.one_hot / nn.Embedding: an id outside [0, vocab) is an
    error, never a silent zero vector (an off-by-one vocabulary trains on zeros)."""
    with pytest.raises(oc.RuntimeDataError, match=r"cell \(1,\) is .*outside \[0, 3\)"):
        oc.nn.one_hot(oc.ndarray(np.array([0.0, bad, 2.0]), label="ids_c"), 3)
    ids = oc.term("tok_range", batch_dims=[2], output_dims=[2])
    emb = oc.nn.embedding(3, 4)(ids)
    ctx = oc.Context()
    ctx.set(ids, np.array([[0.0, 2.0], [1.0, 2.0]]))
    assert ctx.eval(emb).shape == (2, 2, 4)
    with pytest.raises(oc.RuntimeDataError, match=r"'tok_range' holds integer ids .*"
                                                  r"outside \[0, 3\).*embedding|one_hot"):
        ctx.set(ids, np.array([[0.0, 2.0], [bad, 2.0]]))


def test_the_smallest_vocabulary_among_readers_bounds_the_ids() -> None:
    ids = oc.term("shared_ids", output_dims=[2])
    oc.nn.one_hot(ids, 5)
    oc.nn.one_hot(ids, 3)
    oc.nn.one_hot(ids, 4)
    ctx = oc.Context()
    ctx.set(ids, np.array([2.0, 0.0]))
    with pytest.raises(oc.RuntimeDataError, match=r"outside \[0, 3\)"):
        ctx.set(ids, np.array([3.0, 0.0]))


def test_integer_precision_ids_are_range_checked() -> None:
    ids = oc.ndarray(np.array([[0], [1]], dtype=np.uint32), batch_axes=1, label="u_ids",
                     precision="uint32")
    np.testing.assert_array_equal(oc.Context().eval(oc.nn.one_hot(ids, 2)).reshape(2, 2),
                                  [[1, 0], [0, 1]])
    with pytest.raises(oc.RuntimeDataError, match=r"'u_big' .*outside \[0, 2\)"):
        oc.nn.one_hot(oc.ndarray(np.array([0, 7], dtype=np.uint32), label="u_big",
                                 precision="uint32"), 2)
