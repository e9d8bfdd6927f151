"""Checks of integer ids (`oc.nn.one_hot`, `oc.nn.embedding`, class targets) under
``OCANNL_AST_CHECK=1``: a NaN, infinite or fractional id would otherwise give an all-zero
one-hot row, i.e. a finite, silently wrong loss.

Ids are float cells. `mark_ids` follows the ids tensor back through one-operand operations
(slices, transposes, copies) to the data it comes from: constant data is checked at once,
and data the caller sets (`oc.term`, or an `oc.ndarray` re-set later) is checked by
`check_set` each time `Context.set` writes it.

Input: the ids tensor of a lookup, host data being set. Output: RuntimeDataError or nothing.
"""

from __future__ import annotations

import weakref

import numpy as np

from .. import config
from ..errors import RuntimeDataError, Span, user_span
from .node import Init, Tensor

#: data tensors that hold ids, by tensor id: the tensor (weakly) and what reads it
_marked: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_readers: dict[int, tuple[str, Span | None]] = {}


def _sources(ids: Tensor) -> list[Tensor]:
    """The data leaves `ids` copies its cells from (through one-operand operations)."""
    out: list[Tensor] = []
    seen: set[int] = set()
    stack = [ids]
    while stack:
        t = stack.pop()
        if t.id in seen:
            continue
        seen.add(t.id)
        if t.init is Init.CONST and t.alias_of is None:
            out.append(t)
        elif len(t.operands) == 1:
            stack.append(t.operands[0])
    return out


def mark_ids(ids: Tensor, reader: str) -> None:
    """Record that `ids` holds integer ids read by `reader` (e.g. "one_hot"); with checks
    on, constant data behind it is checked now."""
    span = user_span()
    for src in _sources(ids):
        if src.id not in _marked:
            weakref.finalize(src, _readers.pop, src.id, None)
        _marked[src.id] = src
        _readers[src.id] = (reader, span)
        value = src.init_value
        if config.checking() and value is not None and not isinstance(value, Tensor):
            _check(src, np.asarray(value, dtype=np.float64))


def check_set(t: Tensor, values: np.ndarray) -> None:
    """`Context.set(t, values)` under ``OCANNL_AST_CHECK=1``: ids must be integers."""
    if config.checking() and _marked.get(t.id) is t:
        _check(t, values)


def _check(t: Tensor, values: np.ndarray) -> None:
    arr = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(arr)
    bad[~bad] = arr[~bad] != np.floor(arr[~bad])
    if not bad.any():
        return
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    reader, span = _readers.get(t.id, ("a lookup", None))
    at = f" (read by {reader} at {span})" if span is not None else f" (read by {reader})"
    raise RuntimeDataError(f"'{t.label}' holds integer ids{at}, but cell {where} is "
                           f"{arr[where]!r} ({int(bad.sum())} bad cell(s) in all): ids must "
                           "be finite integers", user_span())
