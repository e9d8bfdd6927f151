"""Differential fuzzing of `oc.einsum` / `oc.einsum_max` against a NumPy reference
(`fuzz_oracle.contract`, which agrees with `numpy.einsum` where that applies). Each
category is its own test so that a failing feature is identifiable from the test name."""

from __future__ import annotations

from fuzz_harness import report, run_programs, seeds
from gen_einsum import Knobs, einsum_programs


def _run(kind: str, category: int, n: int, k: Knobs) -> None:
    programs = einsum_programs(kind, seeds(category, n), k)
    failures = run_programs(programs)
    assert not failures, report(failures, len(programs))


def test_fuzz_einsum_basic() -> None:
    """1-3 operands: rows, row variables, diagonals, fixed indices; a result-only label
    is a SpecError."""
    _run("einsum/basic", 1, 800, Knobs(features=0.4))


def test_fuzz_einsum_many_operands() -> None:
    _run("einsum/many", 2, 120, Knobs(min_ops=4, max_ops=6, features=0.2))


def test_fuzz_einsum_zero_size_axes() -> None:
    _run("einsum/zero", 3, 100, Knobs(zero=True, features=0.2))


def test_fuzz_einsum_broadcast_size1() -> None:
    """Size-1 operand axes broadcast against a larger label (einsum broadcasts like
    Pointwise_bin, seed 002)."""
    _run("einsum/bcast", 4, 150, Knobs(bcast=True, features=0.2))


def test_fuzz_einsum_max() -> None:
    """Unary max-reduce and binary max-plus (tropical) products."""
    _run("einsum_max", 5, 150, Knobs(reduce="max", features=0.3))
