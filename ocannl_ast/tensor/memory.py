"""What a context's buffers hold against what an allocator by liveness needs: the kept
state (params, grads, optimizer state, data, whatever routines share), each buffer once,
plus the most intermediate bytes one routine has live at once by its assignments
(`lowering.asgn_analysis.lifetimes`: independent of what the compiler inlines or how it
shares storage). Input: the context's arrays and routines' lifetimes. Output: a
`MemoryReport`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import numpy as np

from ..lowering.asgn_analysis import Lifetimes
from ..records import record


@record
class MemoryReport:
    """`Context.memory_report`: bytes allocated against the liveness bound."""

    allocated_bytes: int  #: held by the context's arrays
    buffers: int  #: how many arrays
    state_bytes: int  #: of arrays kept across runs (params, grads, optimizer state, data)
    live_peak_bytes: int  #: most intermediate bytes live at once in one routine
    #: the part of `state_bytes` held for params: their values and grads, optimizer state
    static_bytes: int = 0

    @property
    def bound_bytes(self) -> int:
        """What an allocator by liveness needs: the state plus the live peak."""
        return self.state_bytes + self.live_peak_bytes

    @property
    def ratio(self) -> float:
        """Allocated over the bound (1.0: no more than liveness needs)."""
        return self.allocated_bytes / max(1, self.bound_bytes)

    def __str__(self) -> str:
        return (f"{self.allocated_bytes / 1e6:.2f} MB in {self.buffers} buffers; state "
                f"{self.state_bytes / 1e6:.2f} MB (params, grads, optimizer state "
                f"{self.static_bytes / 1e6:.2f} MB) + live peak "
                f"{self.live_peak_bytes / 1e6:.2f} MB = {self.bound_bytes / 1e6:.2f} MB "
                f"({self.ratio:.2f}x the bound)")


def report(arrays: Mapping[int, np.ndarray], kept: frozenset[int] | set[int],
           held: frozenset[int], lifetimes: Mapping[str, Lifetimes],
           routines: Collection[str], itemsize: int) -> MemoryReport:
    """The report of these arrays: `kept` the buffers kept across runs (escaping, set by
    the user), `held` those of params and optimizer state, `lifetimes` per routine name
    (only `routines`, those still compiled, count), `itemsize` a cell's bytes."""
    allocated = sum(a.nbytes for a in arrays.values())
    state_ids = {b for b in arrays if b in kept or b in held}
    state = sum(arrays[b].nbytes for b in state_ids)
    static = sum(arrays[b].nbytes for b in state_ids if b in held)
    every_kept = frozenset(kept) | held
    peak = max((lt.peak_cells(every_kept) for n, lt in lifetimes.items() if n in routines),
               default=0) * itemsize
    return MemoryReport(allocated, len(arrays), state, peak, static)
