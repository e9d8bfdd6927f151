"""Differential fuzzing of einsums with labels on both sides of a row variable (issue 21
items 1 and 4): applied to leaves and to pointwise results of the same leaves, each must
agree with NumPy, so whether an operand is data or computed never changes the answer
(no size-1 axis invented for an open row, no computed size-1 axis treated otherwise than
data of size 1)."""

from __future__ import annotations

from fuzz_harness import report, run_programs, seeds
from gen_rowvar import rowvar_programs


def test_fuzz_rowvar_leaf_and_pointwise_agree() -> None:
    programs = rowvar_programs(seeds(40, 150))
    failures = run_programs(programs)
    assert not failures, report(failures, len(programs))


def test_fuzz_rowvar_covers_both_sides_and_units() -> None:
    """The generator does draw what the test is for (a guard against a vacuous fuzzer)."""
    programs = rowvar_programs(seeds(40, 150))
    tags = [p.tags for p in programs]
    assert sum("pointwise" in t for t in tags) == sum("leaf" in t for t in tags) > 100
    assert sum("unit_axis" in t for t in tags) > 30
    assert sum("ops2" in t for t in tags) > 20
    assert sum(", ..r.., " in p.note for p in programs) > 50
