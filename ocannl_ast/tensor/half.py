"""Host side of 16-bit storage (`Precision.is_half`): the NumPy dtype a context's arrays
use, and bfloat16, which NumPy lacks, as uint16 bit patterns.

A float16 context stores `np.float16` arrays (`ctx.get` returns float16); a bfloat16 one
stores the top 16 bits of float32s in `np.uint16` arrays and `ctx.get` returns float32
(every bfloat16 is one exactly). Writing host data rounds to nearest even once, from the
data's own precision (no double rounding through float32), as the compiled stores do.

Input: host arrays. Output: stored arrays and back. Example:
``to_bfloat16_bits(np.array([1.0, 1/3]))`` -> ``array([16256, 16043], dtype=uint16)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..lowering.loop_ir import Precision

#: The dtype of a context's arrays, per precision.
STORAGE_DTYPE: dict[Precision, np.dtype[Any]] = {
    Precision.FLOAT32: np.dtype(np.float32), Precision.FLOAT64: np.dtype(np.float64),
    Precision.FLOAT16: np.dtype(np.float16), Precision.BFLOAT16: np.dtype(np.uint16)}
#: The dtype `ctx.get` returns and `ctx.set` takes values as, per precision.
VALUE_DTYPE: dict[Precision, np.dtype[Any]] = {
    **STORAGE_DTYPE, Precision.BFLOAT16: np.dtype(np.float32)}


def round_to_bfloat16(values: Any) -> np.ndarray:
    """`values` rounded to the nearest bfloat16 (ties to even; NaN stays NaN, overflow is
    infinite), as exact float32s."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.asarray(values, dtype=np.float64)
        m, e = np.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1
        e = np.maximum(e, -125)  # below 2**-126 bfloat16 is subnormal: fixed quantum 2**-133
        q = np.ldexp(np.round(np.ldexp(x, 8 - e)), e - 8)  # np.round: ties to even
        q = np.where(np.isfinite(x), q, x)
        out = q.astype(np.float32)  # exact, or inf past bfloat16's largest
    return out


def to_bfloat16_bits(values: Any) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of `values`, rounded to nearest even."""
    r = round_to_bfloat16(values)
    bits = (np.ascontiguousarray(r).view(np.uint32) >> 16).astype(np.uint16)
    nan = np.isnan(r)
    bits[nan] |= np.uint16(0x40)  # a quiet NaN
    return bits


def from_bfloat16_bits(bits: Any) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (uint16)."""
    b = np.ascontiguousarray(np.asarray(bits, dtype=np.uint16))
    return (b.astype(np.uint32) << 16).view(np.float32)


def to_storage(precision: Precision, values: np.ndarray) -> np.ndarray:
    """Host values (of `VALUE_DTYPE`, or float64 for bfloat16) as stored cells."""
    if precision is Precision.BFLOAT16:
        return to_bfloat16_bits(values)
    return values


def from_storage(precision: Precision, cells: np.ndarray) -> np.ndarray:
    """Stored cells as values of `VALUE_DTYPE[precision]` (a new array)."""
    if precision is Precision.BFLOAT16:
        return from_bfloat16_bits(cells)
    return cells.copy()
