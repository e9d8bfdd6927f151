"""Threefry-4x32-20 reference: Random123 known-answer vectors and the uniform mapping."""

from __future__ import annotations

import numpy as np
import pytest

from ocannl_ast.lowering.threefry import threefry4x32, uniform_cells, uniform_from_word0

# Random123's tests/kat_vectors, "threefry4x32 20" lines: counter, key, expected output.
# (As reproduced in D. E. Shaw Research's core123 threefry KAT test and the randii tests.)
KAT_4X32_20 = [
    ((0, 0, 0, 0), (0, 0, 0, 0), (0x9C6CA96A, 0xE17EAE66, 0xFC10ECD4, 0x5256A7D8)),
    (
        (0xFFFFFFFF,) * 4,
        (0xFFFFFFFF,) * 4,
        (0x2A881696, 0x57012287, 0xF6C7446E, 0xA16A6732),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0, 0x082EFA98, 0xEC4E6C89),
        (0x59CD1DBB, 0xB8879579, 0x86B5D00C, 0xAC8B6D84),
    ),
]


@pytest.mark.parametrize(("ctr", "key", "expected"), KAT_4X32_20)
def test_known_answers(ctr: tuple[int, ...], key: tuple[int, int, int, int], expected) -> None:
    out = threefry4x32(key, np.array([ctr], dtype=np.uint32))
    assert out.dtype == np.uint32
    assert out.shape == (1, 4)
    assert tuple(int(w) for w in out[0]) == expected


def test_vectorized_rows_are_independent() -> None:
    ctrs = np.array([kat[0] for kat in KAT_4X32_20[:2]] * 3, dtype=np.uint32)
    out = threefry4x32((0, 0, 0, 0), ctrs)
    assert tuple(out[0]) == KAT_4X32_20[0][2]
    assert np.array_equal(out[::2], np.repeat(out[:1], 3, axis=0))


def test_bad_inputs() -> None:
    with pytest.raises(ValueError, match="shape"):
        threefry4x32((0, 0, 0, 0), np.zeros(4, np.uint32))
    with pytest.raises(ValueError, match="32-bit"):
        threefry4x32((1 << 32, 0, 0, 0), np.zeros((1, 4), np.uint32))


def test_uniform_from_word0_extremes() -> None:
    words = np.array([[0, 1, 2, 3], [0xFF, 0, 0, 0], [0x100, 0, 0, 0], [0xFFFFFFFF, 0, 0, 0]])
    u = uniform_from_word0(words.astype(np.uint32))
    assert u.tolist() == [0.0, 0.0, 2.0**-24, 1.0 - 2.0**-24]
    assert uniform_from_word0(np.array([0x100], np.uint32)).tolist() == [2.0**-24]
    assert np.array_equal(u.astype(np.float32).astype(np.float64), u)  # exact in float32


def test_uniform_cells_uses_counters_i000() -> None:
    key = (7, 0xDEADBEEF, 3, 0x12345678)
    ctrs = np.zeros((5, 4), np.uint32)
    ctrs[:, 0] = np.arange(5)
    assert np.array_equal(uniform_cells(key, 5), uniform_from_word0(threefry4x32(key, ctrs)))
    assert uniform_cells(key, 0).shape == (0,)


def test_uniform_cells_statistics() -> None:
    u = uniform_cells((1, 2, 3, 4), 20000)
    assert 0.0 <= u.min() and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.01
    assert abs(u.var() - 1 / 12) < 0.005
    assert not np.array_equal(u[:100], uniform_cells((1, 2, 3, 5), 100))
