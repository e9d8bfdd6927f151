"""Splitting data across ranks: `shard` gives this rank its equal contiguous part of a
resident data set; `round_robin` is the alternative where every rank holds the whole data
set and rank r takes batches r, r+N, r+2N, ... Input: NumPy arrays or batch counts.
Output: this rank's part."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..errors import ArgumentError, user_span
from .world import World, current


def shard(array: Any, axis: int = 0, *, world: World | None = None) -> np.ndarray:
    """This rank's equal contiguous part of `array` along `axis` (rank r of N gets the r-th
    of N equal slices); an `oc.ArgumentError` when the axis does not divide evenly.

    Example: with 2 ranks, ``ocd.shard(np.arange(8))`` is ``[0 1 2 3]`` on rank 0 and
    ``[4 5 6 7]`` on rank 1 (a world of one gets the whole array).
    """
    w = world or current()
    arr = np.asarray(array)
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise ArgumentError(f"ocd.shard: axis must be an int, got {axis!r}", user_span())
    if not -arr.ndim <= axis < arr.ndim:
        raise ArgumentError(f"ocd.shard: axis {axis} is out of range for an array of shape "
                            f"{arr.shape}", user_span())
    n = arr.shape[axis]
    if n % w.size:
        raise ArgumentError(
            f"ocd.shard: axis {axis} of an array of shape {arr.shape} has {n} entries, not "
            f"divisible by the {w.size} ranks: make it a multiple of {w.size} (drop or pad "
            f"{n % w.size} entries) so every rank gets an equal part", user_span())
    part = n // w.size
    index = [slice(None)] * arr.ndim
    index[axis] = slice(w.rank * part, (w.rank + 1) * part)
    return np.ascontiguousarray(arr[tuple(index)])


def round_robin(n_batches: int, steps: int, *, start: int = 0,
                world: World | None = None) -> Iterator[int]:
    """The batch indices this rank takes at global steps start, ..., start+steps-1, when
    every rank holds the whole data set of `n_batches` batches: at global step s rank r of
    N takes batch (s*N + r) mod n_batches, so one global step covers N consecutive batches.

    Example: 2 ranks, 4 batches: rank 0 takes 0, 2, 0, ... and rank 1 takes 1, 3, 1, ...
    """
    w = world or current()
    for name, v in (("n_batches", n_batches), ("steps", steps), ("start", start)):
        if isinstance(v, bool) or not isinstance(v, int) or v < (1 if name == "n_batches" else 0):
            raise ArgumentError(f"ocd.round_robin: {name} must be a "
                                f"{'positive' if name == 'n_batches' else 'non-negative'} int, "
                                f"got {v!r}", user_span())
    for s in range(start, start + steps):
        yield (s * w.size + w.rank) % n_batches
