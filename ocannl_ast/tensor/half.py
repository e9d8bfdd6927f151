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
    Precision.FLOAT16: np.dtype(np.float16), Precision.BFLOAT16: np.dtype(np.uint16),
    Precision.UINT32: np.dtype(np.uint32), Precision.UINT64: np.dtype(np.uint64),
    Precision.INT32: np.dtype(np.int32)}
#: The dtype `ctx.get` returns and `ctx.set` takes values as, per precision.
VALUE_DTYPE: dict[Precision, np.dtype[Any]] = {
    **STORAGE_DTYPE, Precision.BFLOAT16: np.dtype(np.float32)}


def round_to_bfloat16(values: Any) -> np.ndarray:
    """`values` rounded to the nearest bfloat16 (ties to even; NaN stays NaN, overflow is
    infinite), as exact float32s."""
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.asarray(values, dtype=np.float64)
        _m, e = np.frexp(x)  # x = m * 2**e, 0.5 <= |m| < 1
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


# ---- bfloat16 in safetensors files (safetensors.numpy has no bfloat16) ---------------------

_FILE_DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
                "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64,
                "U32": np.uint32, "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_}


def bfloat16_safetensors(arrays: dict[str, np.ndarray], metadata: dict[str, str],
                         bf16: frozenset[str] | None = None) -> bytes:
    """A safetensors file whose entries in `bf16` (None: all) are BF16 (`arrays`: exact
    bfloat16 values there), the others in their own dtype."""
    header: dict[str, Any] = {"__metadata__": metadata}
    chunks, offset = [], 0
    codes = {np.dtype(v): k for k, v in _FILE_DTYPES.items()}
    for name in sorted(arrays):
        arr = np.asarray(arrays[name])
        if bf16 is None or name in bf16:
            code, bits = "BF16", to_bfloat16_bits(arr).astype("<u2").tobytes()
        else:
            code = codes[arr.dtype]
            bits = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": code, "shape": list(np.shape(arr)),
                        "data_offsets": [offset, offset + len(bits)]}
        chunks.append(bits)
        offset += len(bits)
    import json  # at the first save, not at import

    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"".join(chunks)


def has_bfloat16(header: dict[str, Any]) -> bool:
    """Whether a safetensors header lists a BF16 entry."""
    return any(isinstance(v, dict) and v.get("dtype") == "BF16" for v in header.values())


def read_safetensors(data: bytes, header: dict[str, Any]) -> tuple[dict[str, np.ndarray],
                                                                  frozenset[str]]:
    """The entries of a safetensors file with BF16 ones (as float32), and the names of
    those. A malformed entry is a ValueError."""
    start = 8 + int.from_bytes(data[:8], "little")
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (lo, hi) = info["dtype"], info["shape"], info["data_offsets"]
        raw = data[start + lo:start + hi]
        if dtype == "BF16":
            out[name] = from_bfloat16_bits(np.frombuffer(raw, "<u2")).reshape(shape)
        elif dtype in _FILE_DTYPES:
            out[name] = np.frombuffer(raw, np.dtype(_FILE_DTYPES[dtype]).newbyteorder("<")
                                      ).reshape(shape)
        else:
            raise ValueError(f"entry '{name}' has dtype {dtype}, which this library cannot read")
    bf16 = frozenset(n for n, i in header.items() if n != "__metadata__" and i["dtype"] == "BF16")
    return out, bf16
