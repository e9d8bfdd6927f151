"""oc.nn.positional_embedding, sinusoidal_positions and rope from the user's side: values vs
NumPy references, gradients (check_grads), the max_len and odd-feature errors, and the
learned table's checkpointing."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import ocannl_ast as oc


def _np_angles(s: int, f: int, base: float) -> np.ndarray:
    """angle[p, i] = p * base ** (-2 i / f)."""
    return np.arange(s)[:, None] * base ** (-2.0 * np.arange(f // 2)[None, :] / f)


def _np_sinusoidal(s: int, f: int) -> np.ndarray:
    pe = np.zeros((s, f))
    pe[:, 0::2] = np.sin(_np_angles(s, f, 10000.0))
    pe[:, 1::2] = np.cos(_np_angles(s, f, 10000.0))
    return pe


def _np_rope(x: np.ndarray, base: float = 10000.0) -> np.ndarray:
    a = _np_angles(x.shape[-2], x.shape[-1], base)
    x0, x1 = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = x0 * np.cos(a) - x1 * np.sin(a)
    out[..., 1::2] = x0 * np.sin(a) + x1 * np.cos(a)
    return out


def _seq(shape: tuple[int, ...], seed: int = 0) -> tuple[np.ndarray, oc.Tensor]:
    data = np.random.default_rng(seed).normal(size=shape)
    return data, oc.ndarray(data, batch_axes=len(shape) - 2)


# --- sinusoidal_positions ------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 7, 8), (3, 4), (2, 3, 16, 6)])
def test_sinusoidal_positions_match_numpy(shape) -> None:
    _, x = _seq(shape)
    got = oc.Context(precision="float64").eval(oc.nn.sinusoidal_positions(x))
    np.testing.assert_allclose(got, _np_sinusoidal(*shape[-2:]), rtol=0, atol=1e-12)


def test_sinusoidal_positions_added_to_a_sequence_and_known_cells() -> None:
    data, x = _seq((2, 5, 4))
    pe = oc.nn.sinusoidal_positions(x)
    got = oc.Context(precision="float64").eval(x + pe)
    np.testing.assert_allclose(got, data + _np_sinusoidal(5, 4), atol=1e-12)
    table = oc.eval(pe)
    assert table[0].tolist() == [0.0, 1.0, 0.0, 1.0]
    assert math.isclose(table[1, 0], math.sin(1.0), rel_tol=1e-6)
    assert math.isclose(table[3, 3], math.cos(3.0 / 100.0), rel_tol=1e-6)


# --- rope --------------------------------------------------------------------------------


@pytest.mark.parametrize("shape,base", [((2, 6, 8), 10000.0), ((5, 4), 100.0),
                                        ((2, 2, 3, 6), 10000.0)])
def test_rope_matches_numpy(shape, base) -> None:
    data, x = _seq(shape, 1)
    got = oc.Context(precision="float64").eval(oc.nn.rope(x, base=base))
    np.testing.assert_allclose(got, _np_rope(data, base), rtol=0, atol=1e-12)


def test_rope_preserves_norms_and_relative_dot_products() -> None:
    """A rotation per position: norms are kept, and <rope(q)_p, rope(k)_t> depends on p - t
    only (the same q and k at every position)."""
    q = np.random.default_rng(2).normal(size=8)
    k = np.random.default_rng(3).normal(size=8)
    ctx = oc.Context(precision="float64")
    rq = ctx.eval(oc.nn.rope(oc.ndarray(np.tile(q, (6, 1)))))
    rk = ctx.eval(oc.nn.rope(oc.ndarray(np.tile(k, (6, 1)))))
    np.testing.assert_allclose(np.linalg.norm(rq, axis=-1), np.linalg.norm(q), rtol=1e-12)
    dots = rq @ rk.T
    for d in range(-3, 4):
        diag = np.diagonal(dots, offset=d)
        np.testing.assert_allclose(diag, diag[0], rtol=1e-10, atol=1e-12)


def test_rope_gradients() -> None:
    up = np.random.default_rng(4).normal(size=(4, 6))
    weights = oc.ndarray(up)
    oc.testing.check_grads(lambda x: oc.einsum("s,f;s,f=>", oc.nn.rope(x, base=50.0), weights),
                           [np.random.default_rng(5).normal(size=(4, 6))])


def test_rope_gradient_is_the_inverse_rotation() -> None:
    """d sum(u * rope(x)) / dx = rope^-1(u): rotating by the negative angles (NumPy)."""
    u = np.random.default_rng(6).normal(size=(3, 5, 4))
    x = oc.param("rope_x", init=np.random.default_rng(7).normal(size=(5, 4)))
    loss = oc.einsum("b|s,f;s,f=>", oc.ndarray(u, batch_axes=1), oc.nn.rope(x))
    _, (g,) = oc.value_and_grad(loss, [x], ctx=oc.Context(precision="float64"))
    a = _np_angles(5, 4, 10000.0)
    s = u.sum(0)
    expected = np.empty_like(s)
    expected[:, 0::2] = s[:, 0::2] * np.cos(a) + s[:, 1::2] * np.sin(a)
    expected[:, 1::2] = -s[:, 0::2] * np.sin(a) + s[:, 1::2] * np.cos(a)
    np.testing.assert_allclose(g, expected, rtol=1e-12, atol=1e-12)


# --- positional_embedding ------------------------------------------------------------------


def test_positional_embedding_adds_the_first_rows_of_its_table() -> None:
    data, x = _seq((3, 5, 4))
    layer = oc.nn.positional_embedding(9)
    y = layer(x)
    ctx = oc.Context(precision="float64")
    got = ctx.eval(y)
    (table,) = y.params()
    assert str(table.shape) == "9->4"
    full = ctx.get(table).T  # stored (features, max_len), as oc.nn.embedding's table
    assert full.shape == (9, 4)
    np.testing.assert_allclose(got, data + full[:5], rtol=0, atol=1e-12)
    # the same layer on a shorter sequence shares the table
    short_data, short = _seq((2, 2, 4), 1)
    np.testing.assert_allclose(ctx.eval(layer(short)), short_data + full[:2], atol=1e-12)


def test_positional_embedding_gradient_reaches_only_the_used_rows() -> None:
    up = np.random.default_rng(8).normal(size=(2, 3, 4))
    _, x = _seq((2, 3, 4))
    y = oc.nn.positional_embedding(6)(x)
    loss = oc.einsum("b|s,f;b|s,f=>", y, oc.ndarray(up, batch_axes=1))
    _, (g,) = oc.value_and_grad(loss, y.params(), ctx=oc.Context(precision="float64"))
    expected = np.zeros((6, 4))
    expected[:3] = up.sum(0)
    np.testing.assert_allclose(g.T, expected, rtol=1e-12)


def test_positional_embedding_trains_and_checkpoints(tmp_path: Path) -> None:
    data, x = _seq((4, 3, 2))
    layer = oc.nn.positional_embedding(5)
    loss = oc.nn.mse(layer(x), oc.ndarray(data + 1.0, batch_axes=1))
    code = [oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.1)]
    ctx = oc.Context(precision="float64")
    step = ctx.compile(code)
    for _ in range(200):
        step()
    (table,) = loss.params()
    np.testing.assert_allclose(ctx.get(table)[:, :3], 1.0, atol=1e-3)
    path = tmp_path / "pos.safetensors"
    ctx.save(path)
    fresh = oc.Context(precision="float64")
    fresh.compile(code)
    fresh.load(path)
    np.testing.assert_array_equal(fresh.get(table), ctx.get(table))


def test_positional_embedding_longer_sequence_than_max_len_is_located() -> None:
    _, x = _seq((2, 6, 4))
    layer = oc.nn.positional_embedding(5)
    with pytest.raises(oc.ShapeError, match="6 positions.*max_len=5") as e:
        layer(x)
    assert e.value.span is not None and e.value.span.file == __file__


def test_positional_embedding_too_long_sequence_found_at_inference_is_located() -> None:
    """x's length is known only once shapes are inferred: still a located ShapeError."""
    y = oc.nn.positional_embedding(3)(oc.term("tokens"))
    with pytest.raises(oc.ShapeError) as e:
        oc.infer_shapes(oc.einsum("b|s,f;b|s,f=>", y, oc.ndarray(np.zeros((2, 4, 5)),
                                                                batch_axes=1)))
    assert e.value.span is not None and e.value.span.file == __file__


@pytest.mark.parametrize("fn", [oc.nn.rope, oc.nn.sinusoidal_positions])
def test_odd_feature_count_is_a_located_error(fn) -> None:
    _, x = _seq((2, 3, 5))
    with pytest.raises(oc.ShapeError, match="even") as e:
        fn(x)
    assert e.value.span is not None and e.value.span.file == __file__


@pytest.mark.parametrize("fn", [oc.nn.rope, oc.nn.sinusoidal_positions,
                                lambda x: oc.nn.positional_embedding(4)(x)])
def test_a_sequence_needs_two_output_axes(fn) -> None:
    with pytest.raises(oc.ShapeError, match="two output axes"):
        fn(oc.ndarray(np.zeros((2, 3, 4, 2)), batch_axes=0))


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", None, True])
def test_positional_embedding_bad_max_len(bad) -> None:
    with pytest.raises(oc.ArgumentError, match="max_len"):
        oc.nn.positional_embedding(bad)


@pytest.mark.parametrize("bad", [1.0, 0.5, float("nan"), float("inf"), "x"])
def test_rope_bad_base(bad) -> None:
    with pytest.raises((oc.ArgumentError, oc.RuntimeDataError), match="base"):
        oc.nn.rope(oc.ndarray(np.zeros((3, 4))), base=bad)
