"""Random draws that differ per rank of a data-parallel world where they must, and agree
where they must.

A random op that draws one number per cell from a counter-based generator (`oc.nn.dropout`:
threefry of the cell's linear offset) adds `rank_offset(shaped)` to its counters: a
one-cell held-out constant, 0.0 in every context until `ocd.data_parallel` sets it, in the
step's context, to ``rank * cells(shaped)``. Rank r of N therefore draws the counters
``r * n .. r * n + n - 1``, the ones a single process over the global batch draws for the
r-th contiguous share of it (when the share is taken along the outermost axis of the
drawn tensor, as `ocd.shard` of the batch axis gives): the ranks' draws are distinct,
together they are the single process's, and each rank's stream is deterministic. In a
world of one the offset stays 0 and ``counter + 0.0`` is ``counter``: the same bits as a
plain process. Parameter initialization (keyed by seed and name) never reads an offset,
and `ocd.data_parallel` refuses update code that reads one, so what must agree across
ranks (params, optimizer state) does.

The offset is data (a held-out constant, not a folded literal), so every rank compiles the
same program, and it is no state: checkpoints do not store it.

Input: tensors. Output: the offset constants, and those a graph reads.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from .leaves import ndarray
from .node import Tensor

#: each live offset constant -> the tensor whose cell count scales it
_SHAPED_BY: weakref.WeakKeyDictionary[Tensor, Tensor] = weakref.WeakKeyDictionary()


def rank_offset(shaped: Tensor) -> Tensor:
    """A one-cell constant (0.0 until a data-parallel step sets it) to add to the per-cell
    counters of a random draw shaped like `shaped`.

    Example: ``counters = oc.range_over_offsets() + rank_offset(x)`` inside an op drawing
    one number per cell of ``x``."""
    t = ndarray(np.zeros(1), label="rank_offset")
    _SHAPED_BY[t] = shaped
    return t


def offsets_in(*roots: Any) -> list[tuple[Tensor, Tensor]]:
    """The (offset constant, shaped-by tensor) pairs the graphs of `roots` read, in
    creation order (non-tensors are skipped)."""
    seen: dict[int, tuple[Tensor, Tensor]] = {}
    for root in roots:
        if isinstance(root, Tensor):
            for t in root.subgraph():
                shaped = _SHAPED_BY.get(t)
                if shaped is not None:
                    seen[t.id] = (t, shaped)
    return [seen[k] for k in sorted(seen)]
