"""The one source of fresh ids: shape variables, constraint ids, shapes and loop symbols.

Every id the compiler invents comes from here, so ids made in different places (a shape
solver, projection derivation, lowering) never collide and no counter needs an offset.
Ids only need to be distinct and increasing; nothing reads their values.
"""

from __future__ import annotations

import itertools

_next = itertools.count(1)


def fresh_id() -> int:
    """A process-unique positive int, larger than every id handed out before."""
    return next(_next)
