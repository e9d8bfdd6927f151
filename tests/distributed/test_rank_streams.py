"""Random draws keyed by rank, in one process (fake peers stand in for the other rank):
rank r of N draws, for its share of the batch, the dropout mask a single process draws for
that share of the whole batch, so the ranks' masks differ and together make up the single
process's; a world of one draws a plain process's masks bit for bit; param init does not
depend on the rank; update code that draws is refused; too many counters are refused."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
import ocannl_ast.distributed as ocd
from ocannl_ast.distributed.comm import LocalComm
from ocannl_ast.distributed.world import World

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
    loss, h, w = _model(xs, layer)
    ctx = oc.Context(precision=precision)
    step = ocd.data_parallel(ctx, loss, oc.sgd_update(loss, learning_rate=0.01),
                             world=world, check_every=0)
    return ctx, step, h


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_each_rank_draws_the_single_process_mask_of_its_share(precision: str) -> None:
    xs = _xs()
    layer = oc.nn.dropout(RATE, seed=5)
    loss, h, w = _model(xs, layer)
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
    grad, update = (ref.compile(oc.grad_update(loss)),
                    ref.compile(oc.sgd_update(loss, learning_rate=0.01)))
    for _ in range(4):
        assert ctx.eval(h).tobytes() == ref.eval(h).tobytes()
        step()
        grad()
        update()
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
