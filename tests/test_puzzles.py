"""docs/puzzles.md: each of Sasha Rush's 21 Tensor Puzzles, as written on the page, against the
puzzle's own loop specification (transcribed below) on random inputs."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ocannl_ast as oc
from test_docs import blocks_of

PAGE = Path(__file__).resolve().parent.parent / "docs" / "puzzles.md"


@pytest.fixture(scope="module")
def page() -> dict[str, Any]:
    """The page's functions: its blocks run in order in one namespace, as the docs test does."""
    ns: dict[str, Any] = {"__name__": "puzzles"}
    for block in blocks_of(PAGE):
        code = "\n" * (block.start - 1) + "\n".join(block.lines)
        exec(compile(code, str(PAGE), "exec"), ns)
    return ns


# ---- the puzzles' specifications, as loops ----------------------------------------------------

def ones_spec(i: int) -> np.ndarray:
    return np.ones(i)


def sum_spec(a: np.ndarray) -> np.ndarray:
    out = np.zeros(1)
    for x in a:
        out[0] += x
    return out


def outer_spec(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((len(a), len(b)))
    for i in range(len(a)):
        for j in range(len(b)):
            out[i, j] = a[i] * b[j]
    return out


def diag_spec(a: np.ndarray) -> np.ndarray:
    return np.array([a[i, i] for i in range(len(a))])


def eye_spec(j: int) -> np.ndarray:
    out = np.zeros((j, j))
    for i in range(j):
        out[i, i] = 1
    return out


def triu_spec(j: int) -> np.ndarray:
    out = np.zeros((j, j))
    for i in range(j):
        for k in range(j):
            out[i, k] = 1 if i <= k else 0
    return out


def cumsum_spec(a: np.ndarray) -> np.ndarray:
    out = np.zeros(len(a))
    total = 0.0
    for i, x in enumerate(a):
        total += x
        out[i] = total
    return out


def diff_spec(a: np.ndarray) -> np.ndarray:
    out = np.zeros(len(a))
    out[0] = a[0]
    for i in range(1, len(a)):
        out[i] = a[i] - a[i - 1]
    return out


def vstack_spec(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    out = np.zeros((2, len(a)))
    for i in range(len(a)):
        out[0, i] = a[i]
        out[1, i] = b[i]
    return out


def roll_spec(a: np.ndarray) -> np.ndarray:
    return np.array([a[(i + 1) % len(a)] for i in range(len(a))])


def flip_spec(a: np.ndarray) -> np.ndarray:
    return np.array([a[len(a) - i - 1] for i in range(len(a))])


def compress_spec(g: np.ndarray, v: np.ndarray, i: int) -> np.ndarray:
    out = np.zeros(i)
    j = 0
    for k in range(len(g)):
        if g[k]:
            out[j] = v[k]
            j += 1
    return out


def pad_to_spec(a: np.ndarray, i: int, j: int) -> np.ndarray:
    out = np.zeros(j)
    for k in range(min(i, j)):
        out[k] = a[k]
    return out


def sequence_mask_spec(values: np.ndarray, length: np.ndarray) -> np.ndarray:
    out = np.zeros(values.shape)
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            out[i, j] = values[i, j] if j < length[i] else 0
    return out


def bincount_spec(a: np.ndarray, j: int) -> np.ndarray:
    out = np.zeros(j)
    for x in a:
        out[int(x)] += 1
    return out


def scatter_add_spec(values: np.ndarray, link: np.ndarray, j: int) -> np.ndarray:
    out = np.zeros(j)
    for k in range(len(values)):
        out[int(link[k])] += values[k]
    return out


def flatten_spec(a: np.ndarray) -> np.ndarray:
    n, m = a.shape
    return np.array([a[k // m, k % m] for k in range(n * m)])


def linspace_spec(lo: float, hi: float, n: int) -> np.ndarray:
    return np.array([lo + (hi - lo) * k / max(1, n - 1) for k in range(n)])


def heaviside_spec(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.array([b[k] if a[k] == 0 else float(a[k] > 0) for k in range(len(a))])


def repeat_spec(a: np.ndarray, d: int) -> np.ndarray:
    out = np.zeros((d, len(a)))
    for r in range(d):
        out[r] = a
    return out


def bucketize_spec(v: np.ndarray, boundaries: np.ndarray) -> np.ndarray:
    out = np.zeros(len(v))
    for i, val in enumerate(v):
        for j in range(len(boundaries)):
            if val >= boundaries[j]:
                out[i] = j + 1
    return out


# ---- random cases -----------------------------------------------------------------------------

def _vec(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(-4, 5, n).astype(np.float64)   # small integers: every sum is exact


def _cases(rng: np.random.Generator) -> list[tuple[str, Callable[..., np.ndarray], tuple, tuple]]:
    """(page function, spec, args for the page, args for the spec), fresh sizes each draw."""
    n, m = (int(x) for x in rng.integers(1, 7, 2))
    a, b = _vec(rng, n), _vec(rng, n)
    sq = rng.integers(-4, 5, (n, n)).astype(np.float64)
    mat = rng.integers(-4, 5, (n, m)).astype(np.float64)
    g = rng.integers(0, 2, n).astype(np.float64)
    ids = rng.integers(0, m, n).astype(np.float64)
    lengths = rng.integers(0, m + 1, n).astype(np.float64)
    bounds = np.sort(rng.choice(np.arange(-6, 7), size=m, replace=False)).astype(np.float64)
    lo, hi = float(rng.integers(-5, 5)), float(rng.integers(-5, 5))
    zeros_in = np.where(rng.random(n) < 0.3, 0.0, a)
    return [
        ("ones_puzzle", ones_spec, (n,), (n,)),
        ("sum_puzzle", sum_spec, (oc.ndarray(a),), (a,)),
        ("outer", outer_spec, (oc.ndarray(a), oc.ndarray(mat[0])), (a, mat[0])),
        ("diag", diag_spec, (oc.ndarray(sq),), (sq,)),
        ("eye", eye_spec, (n,), (n,)),
        ("triu", triu_spec, (n,), (n,)),
        ("cumsum", cumsum_spec, (a,), (a,)),
        ("diff", diff_spec, (a,), (a,)),
        ("vstack", vstack_spec, (a, b), (a, b)),
        ("roll", roll_spec, (a,), (a,)),
        ("flip", flip_spec, (a,), (a,)),
        ("compress", compress_spec, (g, a, n), (g, a, n)),
        ("pad_to", pad_to_spec, (a, n, m), (a, n, m)),
        ("sequence_mask", sequence_mask_spec, (mat, lengths), (mat, lengths)),
        ("bincount", bincount_spec, (ids, m), (ids, m)),
        ("scatter_add", scatter_add_spec, (a, ids, m), (a, ids, m)),
        ("flatten", flatten_spec, (mat,), (mat,)),
        ("linspace", linspace_spec, (lo, hi, n), (lo, hi, n)),
        ("heaviside", heaviside_spec, (zeros_in, b), (zeros_in, b)),
        ("repeat", repeat_spec, (a, m), (a, m)),
        ("bucketize", bucketize_spec, (a, bounds), (a, bounds)),
    ]


PUZZLES = [name for name, *_ in _cases(np.random.default_rng(0))]


def test_all_21_puzzles_are_on_the_page(page: dict[str, Any]) -> None:
    assert len(PUZZLES) == 21
    missing = [name for name in PUZZLES if not callable(page.get(name))]
    assert not missing, missing


@pytest.mark.parametrize("index", range(21), ids=PUZZLES)
def test_puzzle_matches_its_spec(page: dict[str, Any], index: int) -> None:
    for seed in range(3):
        name, spec, args, spec_args = _cases(np.random.default_rng(1000 * index + seed))[index]
        got = np.asarray(oc.eval(page[name](*args)), dtype=np.float64)
        want = spec(*spec_args)
        assert got.shape == want.shape or got.size == want.size == 1, (name, got.shape,
                                                                        want.shape)
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-6, atol=1e-5,
                                   err_msg=f"{name}{spec_args}")
