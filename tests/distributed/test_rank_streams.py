"""Random draws keyed by rank, in one process (fake peers stand in for the other rank):
rank r of N draws, for its share of the batch, the dropout mask a single process draws for
that share of the whole batch, so the ranks' masks differ and together make up the single
process's; a world of one draws a plain process's masks bit for bit; param init does not
depend on the rank; update code that draws is refused; too many counters are refused."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
import ocannl_ast.distributed as ocd
from ocannl_ast.distributed.comm import LocalComm
from ocannl_ast.distributed.world import World
from ocannl_ast.lowering.threefry import number_to_words, threefry4x32

RATE = 0.4


class Peer(LocalComm):
    """Rank `rank` of `size` whose peers hold what this rank holds (all-gathers agree,
    the all-reduce sums `size` equal shares)."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size

    def allreduce_(self, buf: np.ndarray) -> None:
        buf *= float(self.size)

    def allgather(self, obj: Any) -> list[Any]:
        return [obj] * self.size


def _xs() -> np.ndarray:
    return np.random.default_rng(3).normal(size=(8, 12)) + 3.0  # no exact zeros


def _model(xs: np.ndarray, layer: Any) -> tuple[Any, Any, Any]:
    """A param scaling the features, dropout, a sum: the mask is where h is 0."""
    oc.set_seed(11)
    w = oc.param("w", output_dims=[12])
    h = layer(w * oc.ndarray(xs, batch_axes=1, label="x"))
    loss = oc.einsum("b|i=>", h * h) * (1.0 / xs.shape[0])
    return loss, h, w


def _dp(xs: np.ndarray, layer: Any, world: World, precision: str) -> tuple[Any, Any, Any]:
    loss, h, _ = _model(xs, layer)
    ctx = oc.Context(precision=precision)
    step = ocd.data_parallel(ctx, loss, oc.sgd_update(loss, learning_rate=0.01),
                             world=world, check_every=0)
    return ctx, step, h


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_each_rank_draws_the_single_process_mask_of_its_share(precision: str) -> None:
    xs = _xs()
    layer = oc.nn.dropout(RATE, seed=5)
    loss, h, _ = _model(xs, layer)
    full = oc.Context(precision=precision)
    masks_full = []
    plain = full.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.01)])
    for _ in range(2):
        masks_full.append(full.eval(h) == 0.0)
        plain()
    for size in (2, 4):
        share = xs.shape[0] // size
        per_rank = []
        for rank in range(size):
            ctx, step, hr = _dp(xs[rank * share:(rank + 1) * share], layer,
                                World(Peer(rank, size), 30.0), precision)
            assert step.rank_streams == 1
            got = []
            for _ in range(2):
                got.append(ctx.eval(hr) == 0.0)
                step()
            per_rank.append(got)
            assert ctx.get(step.params[0]).shape == (12,)
        for s in range(2):  # together the ranks' masks are the whole batch's, step by step
            np.testing.assert_array_equal(np.concatenate([m[s] for m in per_rank]),
                                          masks_full[s])
            assert (per_rank[0][s] != per_rank[1][s]).mean() > 0.25  # independent, not equal
        assert (per_rank[0][0] != per_rank[0][1]).mean() > 0.25  # a new mask each step


def test_a_world_of_one_draws_a_plain_process_masks_bit_for_bit() -> None:
    xs = _xs()
    layer = oc.nn.dropout(RATE, seed=2)
    loss, h, w = _model(xs, layer)
    ctx = oc.Context()
    step = ocd.data_parallel(ctx, loss, oc.sgd_update(loss, learning_rate=0.01),
                             world=World(LocalComm(), 30.0), check_every=0)
    ref = oc.Context()  # the same graph in another context: params initialized alike
    fused = ref.compile([oc.grad_update(loss), oc.sgd_update(loss, learning_rate=0.01)])
    for _ in range(4):
        assert ctx.eval(h).tobytes() == ref.eval(h).tobytes()
        step()
        fused()
    assert ctx.get(w).tobytes() == ref.get(w).tobytes()
    assert step.rank_streams == 1


def test_param_init_does_not_depend_on_the_rank() -> None:
    xs = _xs()
    layer = oc.nn.dropout(RATE)
    inits = [_dp(xs[:4], layer, World(Peer(r, 2), 30.0), "float32") for r in (0, 1)]
    (c0, s0, _), (c1, s1, _) = inits
    assert c0.get(s0.params[0]).tobytes() == c1.get(s1.params[0]).tobytes()


def test_update_code_that_draws_is_refused() -> None:
    xs = _xs()
    loss, h, _ = _model(xs, oc.nn.dropout(RATE))
    with pytest.raises(oc.ArgumentError, match="update code draws random numbers keyed by "
                                               "rank"):
        ocd.data_parallel(oc.Context(), loss, [oc.sgd_update(loss, learning_rate=0.1),
                                                h.forward_all()],
                          world=World(Peer(1, 2), 30.0), check_every=0)


def test_more_cells_than_exact_counters_is_refused() -> None:
    xs = _xs()
    loss, _, _ = _model(xs, oc.nn.dropout(RATE))
    with pytest.raises(oc.ArgumentError, match=r"96 cells per rank, 201326592 over "
                                               r"2097152 ranks.* 16777216 counters exact"):
        ocd.data_parallel(oc.Context(), loss, oc.sgd_update(loss, learning_rate=0.1),
                          world=World(Peer(0, 1 << 21), 30.0), check_every=0)


def test_dropout_off_keys_nothing() -> None:
    xs = _xs()
    loss, _, _ = _model(xs, lambda x: oc.nn.dropout(RATE)(x, train=False))
    step = ocd.data_parallel(oc.Context(), loss, oc.sgd_update(loss, learning_rate=0.1),
                             world=World(Peer(1, 2), 30.0), check_every=0)
    assert step.rank_streams == 0


def _word0(key: float, counters: np.ndarray) -> np.ndarray:
    """Word 0 of threefry4x32(number key, number counters): the `threefry_bits` op."""
    k = tuple(int(v) for v in number_to_words([key])[0])
    return threefry4x32(k, number_to_words(counters))[:, 0]  # type: ignore[arg-type]


def _reference_keep(seed: int, layer_id: int, step: int, counters: np.ndarray, dt: type
                    ) -> np.ndarray:
    """The dropout keep mask from NumPy's threefry: key = bits(bits(seed, id), step) (each
    stored as a number of the precision), uniform = bits(key, counter) * 2**-32."""
    k1 = dt(_word0(float(seed), np.array([float(layer_id)]))[0])
    k2 = dt(_word0(float(k1), np.array([float(step)]))[0])
    u = _word0(float(k2), counters).astype(dt) * dt(2.0 ** -32)
    return np.asarray(dt(RATE) < u)


@pytest.mark.parametrize("precision,dt", [("float32", np.float32), ("float64", np.float64)])
def test_rank_masks_are_the_threefry_draws_of_their_global_counters(
        precision: str, dt: type, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oc.nn, "_DROPOUT_IDS", itertools.count(41))  # this layer: id 41
    xs = _xs()
    layer = oc.nn.dropout(RATE, seed=9)
    for rank in range(2):
        ctx, step, h = _dp(xs[rank * 4:(rank + 1) * 4], layer, World(Peer(rank, 2), 30.0),
                           precision)
        for s in range(2):
            trained = ctx.eval(h) != 0.0  # the mask this step's grad routine uses
            step()
            counters = np.arange(48) + rank * 48
            np.testing.assert_array_equal(trained.ravel(),
                                          _reference_keep(9, 41, s, counters, dt))


def test_the_mask_a_step_trains_with_is_the_one_eval_shows() -> None:
    """One seed and step give one mask in every routine (the dropout key, a number, is not
    inlined as a whole threefry word into the next draw): the gradient of sum(h) flows
    exactly through the units `ctx.eval(h)` keeps."""
    xs = _xs()
    layer = oc.nn.dropout(RATE, seed=4)
    w = oc.param("w", output_dims=[12], init=1.0)
    h = layer(w * oc.ndarray(xs, batch_axes=1))
    loss = oc.einsum("b|i=>", h)
    ctx = oc.Context(precision="float64")
    grad = ctx.compile(oc.grad_update(loss))
    for s in range(3):
        ctx.set(layer.step, np.array([float(s)]))
        kept = ctx.eval(h) != 0.0
        grad()
        np.testing.assert_allclose(ctx.get(w.grad), (kept * xs).sum(0) / (1 - RATE),
                                   rtol=1e-12)


def test_the_rank_offset_is_no_state_a_checkpoint_stores(tmp_path: Path) -> None:
    """Checkpoints of a dropout model hold the params, their optimizer state and the step
    counter, never the rank offset: a checkpoint saved on rank 0 loads on every rank."""
    loss, _, _ = _model(_xs(), oc.nn.dropout(RATE))
    ctx = oc.Context()
    step = ocd.data_parallel(ctx, loss, oc.adam_update(loss, learning_rate=0.01),
                             world=World(Peer(1, 2), 30.0), check_every=0)
    step()
    ctx.save(tmp_path / "ck.safetensors")
    raw = (tmp_path / "ck.safetensors").read_bytes()
    header = json.loads(raw[8:8 + int.from_bytes(raw[:8], "little")])
    names = {k for k in header if k != "__metadata__"}
    assert "w" in names and any("dropout_step" in k for k in names)
    assert not any("rank_offset" in k for k in names), names
