"""Differential fuzzing of affine indices (seed 001) against direct NumPy loops: strided
reads and writes, valid convolutions read and written (sum and max), sizes inferred in
both directions, offsets, and inconsistent sizes that must raise oc.ShapeError."""

from __future__ import annotations

from fuzz_harness import Program, report, run_programs, seeds
from gen_affine import (
    conv_read_program,
    conv_write_program,
    inconsistent_program,
    stride_program,
)


def _check(programs: list[Program]) -> None:
    failures = run_programs(programs)
    assert not failures, report(failures, len(programs))


def test_fuzz_affine_stride() -> None:
    """`s*o+off => o` and `o => s*o+off`: always consistent, always in bounds."""
    _check([stride_program(sd) for sd in seeds(10, 150)])


def test_fuzz_affine_conv_valid() -> None:
    """`s*o<+d*k` (no offset), read (sum and max-pool, input given or inferred) and write."""
    ss = seeds(11, 200)
    _check([conv_read_program(sd, offset=False) if k % 3 else
            conv_write_program(sd, offset=False) for k, sd in enumerate(ss)])


def test_fuzz_affine_conv_with_offsets() -> None:
    """`s*o<+off+d*k`, off > 0: either a ShapeError or in-bounds values from the loop."""
    ss = seeds(12, 120)
    _check([conv_read_program(sd, offset=True) if k % 3 else
            conv_write_program(sd, offset=True) for k, sd in enumerate(ss)])


def test_fuzz_affine_inconsistent_sizes_raise() -> None:
    """An input too small for the output it must produce: oc.ShapeError, never a value."""
    _check([inconsistent_program(sd) for sd in seeds(13, 100)])
