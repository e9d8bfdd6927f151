"""Per-tensor storage precisions (OCANNL: each tensor node has its own precision, and the
compiler converts at every read and write).

A tensor built with ``precision=`` (`oc.param`, `oc.ndarray`, `oc.term`) or made by
`oc.cast` stores its cells in that precision whatever the context's; every other tensor
stores them in the context's. Arithmetic is the routine's compute precision (float32, or
float64 in a float64 context): a load widens a cell exactly, a store rounds to nearest
even. Integer precisions (uint32, uint64, int32) are for data only (ids that
`oc.nn.one_hot`, `oc.nn.embedding` and class targets read): `ctx.set` checks the values
are integers in range.

Ids keep their precision through copies: a batch slice or transpose of integer data, and
`oc.nn.one_hot`'s operand, are stored in it too (exactly: a routine writes integer cells
only with such copies of integers, `inherit_ids`).

A tensor of its own precision always has a buffer (it is never computed inline, folded or
placed in a shared arena), so its value is the rounded one wherever it is read.

Input: public calls' ``precision`` arguments, host data. Output: `Precision`s on tensors,
the buffers a routine keeps, stored arrays and back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import ArgumentError, RuntimeDataError, user_span
from ..lowering.loop_ir import Precision
from . import half
from .node import Init, NodeKind, Tensor, buffer_ids, node_owner

#: the precisions a tensor may have (the context's are the first four)
FLOATS = ("float32", "float64", "float16", "bfloat16")
INTEGERS = ("uint32", "uint64", "int32")
#: the integer range each integer precision holds
_RANGE = {Precision.UINT32: (0, 2**32 - 1), Precision.UINT64: (0, 2**64 - 1),
          Precision.INT32: (-(2**31), 2**31 - 1)}


def parse(fn: str, precision: Any, *, integers: bool, none: bool = True) -> Precision | None:
    """The `precision` argument of `fn` (None, where `none`: the context's), validated: an
    `ArgumentError` at the user's call for anything else than the names allowed."""
    if precision is None and none:
        return None
    names = FLOATS + INTEGERS if integers else FLOATS
    if not isinstance(precision, str) or precision not in names:
        why = ("" if integers or precision not in INTEGERS else
               " (integer precisions are for data: oc.ndarray, oc.term)")
        raise ArgumentError(f"{fn}: precision must be one of {', '.join(map(repr, names))}"
                            f"{' or None' if none else ''}, got {type(precision).__name__} "
                            f"{precision!r}{why}", user_span())
    return Precision(precision)


def of(t: Tensor, kind: NodeKind, context: Precision) -> Precision:
    """How the buffer of `t`'s value or grad is stored in a context of `context` precision."""
    owner, _ = node_owner(t, kind)
    own = owner.precision
    if own is None or owner.uint4x32:
        return context
    return context.compute if own is Precision.COMPUTE else own


def kept(tensors: Iterable[Tensor], routine: Precision) -> set[int]:
    """The buffer ids of the tensors of their own precision (they keep their buffers). A
    float64 one in a routine computing in float32 is an `ArgumentError`: its digits would
    be lost in the arithmetic."""
    out: set[int] = set()
    for t in tensors:
        owner, _ = node_owner(t, NodeKind.VALUE)
        p = owner.precision
        if p is None or owner.uint4x32:
            continue
        if p is Precision.FLOAT64 and routine.compute is not Precision.FLOAT64:
            raise ArgumentError(f"'{owner.label}' is stored in float64, but this context "
                                f"computes in float32 ({routine.value}): use a float64 context "
                                "(oc.Context(precision=\"float64\")) or give the tensor "
                                "float32", user_span())
        out.update(buffer_ids(owner))
    return out


def storage_dtype(p: Precision) -> np.dtype[Any]:
    """The dtype of the host array of a buffer stored in `p` (bfloat16: uint16 bits)."""
    return half.STORAGE_DTYPE[p]


def value_dtype(p: Precision) -> np.dtype[Any]:
    """The dtype `ctx.get` returns for a tensor stored in `p` (bfloat16: float32)."""
    return half.VALUE_DTYPE[p]


def host_values(p: Precision, label: str, values: Any) -> np.ndarray:
    """Host data for `ctx.set` of a tensor stored in `p`, converted to `value_dtype(p)`
    (bfloat16: rounded once, from float64, by `to_storage`). Integer precisions take only
    finite integers in their range: anything else is a `RuntimeDataError` naming the
    first bad cell."""
    if p is Precision.BFLOAT16:
        return np.asarray(values, dtype=np.float64)
    if not p.is_integer:
        with np.errstate(over="ignore"):  # beyond float16's range is inf, as stored
            return np.asarray(values, dtype=value_dtype(p))
    raw = np.asarray(values)
    if raw.dtype.kind in "iub":
        lo, hi = _RANGE[p]
        wide = raw.astype(object) if raw.dtype.kind == "u" else raw.astype(np.int64)
        bad = (wide < lo) | (wide > hi)
    else:
        with np.errstate(invalid="ignore"):
            f = np.asarray(raw, dtype=np.float64)
            lo, hi = _RANGE[p]
            bad = ~np.isfinite(f)
            ok = f[~bad]  # the bounds as floats, exactly: lo and hi + 1 are powers of two
            bad[~bad] = (ok != np.floor(ok)) | (ok < float(lo)) | (ok >= float(hi + 1))
    if np.any(bad):
        where = tuple(int(i) for i in np.argwhere(np.asarray(bad, dtype=bool))[0])
        raise RuntimeDataError(f"'{label}' is stored in {p.value}: cell {where} is "
                               f"{raw[where].item()!r}, not an integer in [{_RANGE[p][0]}, "
                               f"{_RANGE[p][1]}]", user_span())
    return raw.astype(value_dtype(p))


def to_storage(p: Precision, values: np.ndarray) -> np.ndarray:
    """`host_values` as stored cells."""
    return half.to_storage(p, values)


def from_storage(p: Precision, cells: np.ndarray) -> np.ndarray:
    """Stored cells as values of `value_dtype(p)` (a new array)."""
    return half.from_storage(p, cells)


def cast_ok(t: Tensor, p: Precision) -> None:
    """`oc.cast` gives computed tensors float precisions only (`parse` rejects integer
    names); a held-out tensor keeps its own (set it where it is declared)."""
    if t.init is not Init.COMPUTED:
        raise ArgumentError(f"oc.cast: '{t.label}' is a {t.init.value} tensor: give it its "
                            f"precision where it is declared ({t.init.value}(..., "
                            f"precision={p.value!r}))", user_span())



def inherit_ids(result: Tensor, source: Any) -> Tensor:
    """`result` (a copy of `source`'s cells, or of integers computed from them) stored in
    `source`'s integer precision, when it has one: ids stay exact in a 16-bit context."""
    if isinstance(source, Tensor):
        p = of(source, NodeKind.VALUE, Precision.FLOAT32)
        if p.is_integer and not result.diff:
            result.precision = p
    return result
