"""Threefry-4x32-20 (Random123's counter-based generator): the NumPy reference.

Stage: the ground truth for `ThreefryUniform` in the loop IR. Input: a 4-word key and an
(n, 4) array of uint32 counters. Output: (n, 4) uint32 words, and uniforms in [0, 1).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: Rotation constants, one (even-lane, odd-lane) pair per round, cycling every 8 rounds.
ROTATIONS: tuple[tuple[int, int], ...] = (
    (10, 26), (11, 21), (13, 27), (23, 5), (6, 20), (17, 11), (25, 10), (18, 20),
)
#: Skein's key-schedule parity constant (the fifth key word is this xor all key words).
KS_PARITY = 0x1BD11BDA
#: Threefry-4x32-20: the Random123 default round count for this width.
ROUNDS = 20

_MASK32 = 0xFFFFFFFF
U32Array = npt.NDArray[np.uint32]


def _rotl(x: U32Array, r: int) -> U32Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _key_schedule(key: tuple[int, int, int, int]) -> list[np.uint32]:
    for word in key:
        if not 0 <= word <= _MASK32:
            raise ValueError(f"threefry key word {word!r} is not a 32-bit unsigned integer")
    parity = KS_PARITY ^ key[0] ^ key[1] ^ key[2] ^ key[3]
    return [np.uint32(w) for w in (*key, parity)]


def _round(x: list[U32Array], r: int) -> None:
    """One mix round in place; even rounds pair lanes (0,1),(2,3), odd rounds (0,3),(2,1)."""
    rot_a, rot_b = ROTATIONS[r % 8]
    a, b = (1, 3) if r % 2 == 0 else (3, 1)
    x[0] = x[0] + x[a]
    x[a] = _rotl(x[a], rot_a) ^ x[0]
    x[2] = x[2] + x[b]
    x[b] = _rotl(x[b], rot_b) ^ x[2]


def threefry4x32(key: tuple[int, int, int, int], counters: npt.ArrayLike) -> U32Array:
    """Threefry-4x32 with 20 rounds, vectorized over rows of `counters` (shape (n, 4)).

    Matches Random123's ``threefry4x32_R(20, ctr, key)`` (known-answer vectors in the tests).

    >>> threefry4x32((0, 0, 0, 0), np.zeros((1, 4), np.uint32))[0].tolist() == [
    ...     0x9C6CA96A, 0xE17EAE66, 0xFC10ECD4, 0x5256A7D8]
    True
    """
    ctr = np.asarray(counters)
    if ctr.ndim != 2 or ctr.shape[1] != 4:
        raise ValueError(f"threefry counters must have shape (n, 4), got {ctr.shape}")
    ks = _key_schedule(key)
    x = [ctr[:, j].astype(np.uint32) + ks[j] for j in range(4)]
    for r in range(ROUNDS):
        _round(x, r)
        if r % 4 == 3:  # key injection s = 1..5 after every 4 rounds
            s = r // 4 + 1
            for j in range(4):
                x[j] = x[j] + ks[(s + j) % 5]
            x[3] = x[3] + np.uint32(s)
    return np.stack(x, axis=1)


def uniform_from_word0(words: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Uniforms in [0, 1): ``(word0 >> 8) * 2**-24``, exact in float32 and float64.

    `words` is either threefry output of shape (n, 4) (column 0 is used) or a 1-D array
    of word-0 values. Example: ``uniform_from_word0(np.array([0xFFFFFFFF], np.uint32))``
    is ``[1 - 2**-24]``.
    """
    w = np.asarray(words, dtype=np.uint32)
    w0 = w[:, 0] if w.ndim == 2 else w
    return (w0 >> np.uint32(8)).astype(np.float64) * 2.0**-24


def uniform_cells(key: tuple[int, int, int, int], n: int) -> npt.NDArray[np.float64]:
    """The uniforms of cells 0..n-1: counters (i, 0, 0, 0). Example: ``uniform_cells(k, 3)``.

    Cell offsets are 32-bit counters, so `n` may not exceed 2**32.
    """
    if not 0 <= n <= 1 << 32:
        raise ValueError(f"uniform_cells: {n} cells do not fit 32-bit counters")
    counters = np.zeros((n, 4), np.uint32)
    counters[:, 0] = np.arange(n, dtype=np.uint64).astype(np.uint32)
    return uniform_from_word0(threefry4x32(key, counters))


def threefry4x32_words(keys: npt.ArrayLike, counters: npt.ArrayLike) -> U32Array:
    """Threefry-4x32-20 with a key per row: the `threefry4x32` primitive (OCANNL `^^^^`) on
    (n, 4) uint32 keys and counters. Example: ``threefry4x32_words(np.zeros((1, 4)),
    np.zeros((1, 4)))`` is Random123's all-zero known answer."""
    k = np.asarray(keys, dtype=np.uint32).reshape(-1, 4)
    c = np.asarray(counters, dtype=np.uint32).reshape(-1, 4)
    rows = [threefry4x32(tuple(int(w) for w in kr), cr[None, :])[0]  # type: ignore[arg-type]
            for kr, cr in zip(k, c, strict=True)]
    return np.stack(rows) if rows else np.zeros((0, 4), np.uint32)


def number_to_words(values: npt.ArrayLike) -> U32Array:
    """A number as a uint4x32 word: its integer value (64-bit) in words 0 and 1."""
    n = np.asarray(values, dtype=np.float64).astype(np.int64).astype(np.uint64).ravel()
    out = np.zeros((n.size, 4), np.uint32)
    out[:, 0] = (n & np.uint64(_MASK32)).astype(np.uint32)
    out[:, 1] = (n >> np.uint64(32)).astype(np.uint32)
    return out


def uniform_from_words(words: npt.ArrayLike, precision: str) -> npt.NDArray[np.float64]:
    """`uint4x32_to_prec_uniform` of (n, 4) words, flattened: float32 gives 4 uniforms per
    word (each word's top 24 bits), float64 gives 2 (each word pair's top 53 bits)."""
    w = np.asarray(words, dtype=np.uint32).reshape(-1, 4)
    if precision == "float32":
        return ((w >> np.uint32(8)).astype(np.float64) * 2.0**-24).ravel()
    pairs = (w[:, 0::2].astype(np.uint64) << np.uint64(32)) | w[:, 1::2].astype(np.uint64)
    return ((pairs >> np.uint64(11)).astype(np.float64) * 2.0**-53).ravel()
