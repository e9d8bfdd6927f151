"""Checks of integer ids (`oc.nn.one_hot`, `oc.nn.embedding`, class targets): a NaN,
infinite or fractional id, or one outside [0, vocab), would otherwise give an all-zero
one-hot row, i.e. a finite, silently wrong loss (PyTorch raises there too). The checks are
one NumPy pass over host data, so they are always on, whatever ``OCANNL_AST_CHECK`` says.

Ids are float cells. `mark_ids` follows the ids tensor back through one-operand operations
(slices, transposes, copies) to the data it comes from: constant data is checked at once,
and data the caller sets (`oc.term`, or an `oc.ndarray` re-set later) is checked by
`check_set` each time `Context.set` writes it. Ids the routine computes itself are not
checked (they never pass through the host).

Input: the ids tensor of a lookup, host data being set. Output: RuntimeDataError or nothing.
"""

from __future__ import annotations

import weakref

import numpy as np

from ..errors import RuntimeDataError, Span, user_span
from .node import Init, Tensor

#: data tensors that hold ids, by tensor id: the tensor (weakly) and what reads it
_marked: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()
_readers: dict[int, tuple[str, Span | None]] = {}
#: the smallest vocabulary among a data tensor's readers, by tensor id: ids lie below it
_bounds: dict[int, int] = {}


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


def _forget(tid: int) -> None:
    _readers.pop(tid, None)
    _bounds.pop(tid, None)


def mark_ids(ids: Tensor, reader: str, vocab: int) -> None:
    """Record that `ids` holds integer ids in [0, vocab) read by `reader` (e.g. "one_hot");
    constant data behind it is checked now."""
    span = user_span()
    for src in _sources(ids):
        if src.id not in _marked:
            weakref.finalize(src, _forget, src.id)
        _marked[src.id] = src
        bound = min(vocab, _bounds.get(src.id, vocab))
        if bound == vocab:
            _readers[src.id] = (reader, span)
        _bounds[src.id] = bound
        value = src.init_value
        if value is not None and not isinstance(value, Tensor):
            _check(src, np.asarray(value, dtype=np.float64))


def check_set(t: Tensor, values: np.ndarray) -> None:
    """`Context.set(t, values)`: ids must be integers in [0, vocab)."""
    if _marked.get(t.id) is t:
        _check(t, values)


def _check(t: Tensor, values: np.ndarray) -> None:
    arr = np.asarray(values, dtype=np.float64)
    vocab = _bounds.get(t.id)
    if vocab is None:
        return
    with np.errstate(invalid="ignore"):
        bad = ~((arr >= 0) & (arr < vocab) & (arr == np.floor(arr)))
    if not bad.any():
        return
    where = tuple(int(i) for i in np.argwhere(bad)[0])
    reader, span = _readers.get(t.id, ("a lookup", None))
    at = f" (read by {reader} at {span})" if span is not None else f" (read by {reader})"
    value = float(arr[where])
    kind = ("not a finite integer" if not np.isfinite(value) or value != np.floor(value)
            else f"outside [0, {vocab})")
    raise RuntimeDataError(f"'{t.label}' holds integer ids{at}, but cell {where} is "
                           f"{value!r}, {kind} ({int(bad.sum())} bad cell(s) in all): ids "
                           f"must be integers in [0, {vocab}); to pad, use an id in range "
                           "and mask the loss", user_span())
