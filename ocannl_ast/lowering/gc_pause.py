"""Compile passes run with Python's cyclic garbage collector paused.

The passes allocate hundreds of thousands of small immutable IR nodes that all survive
until the pass ends; each collection of the older generations re-walks every one of them
(a quarter of the Python side of a 64-layer MLP step compile, measured with cProfile and
CPU time). The IR holds no reference cycles that need collecting while a pass runs, so
collections wait until the outermost paused region ends (nested regions do nothing);
reference counting frees memory as usual meanwhile.

When the region ends, what it allocated and still holds (the IR a routine keeps, the graph's
shape state) is long-lived: it moves straight to the oldest generation (`gc.freeze` then
`gc.unfreeze`, no traversal) rather than through a young-generation collection of every
object at once and a middle-generation one later (each a walk over all of them: 6% of a
64-layer MLP step's compile). A cycle among them is still collected, by the next full
collection. A program that froze objects itself (`gc.get_freeze_count()`) keeps them frozen:
then the young collection runs as before.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block (unless it is already off); restored on
    exit, exceptions included. Example: ``with gc_paused(): prog = lower(...)``."""
    was_enabled = gc.isenabled()
    if was_enabled:
        gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                gc.freeze()  # everything tracked, to the permanent generation (the young
                gc.unfreeze()  # generation's count reset), then all of it to the oldest
            gc.enable()
