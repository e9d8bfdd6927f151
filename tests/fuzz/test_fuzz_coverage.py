"""The fuzzer's own contract: at least 2,000 programs per run (fixed seeds), and the
generators really draw the features they claim (a generator bug must not hide a class)."""

from __future__ import annotations

from collections import Counter

from fuzz_harness import FUZZ_N, Program, seeds
from gen_affine import conv_read_program, inconsistent_program, stride_program
from gen_einsum import Knobs, einsum_programs
from gen_expr import LEAVES, grad_program, max_grad_program, pointwise_program

#: category -> (number of programs, tags it must cover); mirrors the test modules
EINSUM = {1: (800, Knobs(features=0.4)), 2: (120, Knobs(min_ops=4, max_ops=6, features=0.2)),
          3: (100, Knobs(zero=True, features=0.2)), 4: (150, Knobs(bcast=True, features=0.2)),
          5: (150, Knobs(reduce="max", features=0.3))}


def all_programs() -> list[Program]:
    ps: list[Program] = []
    for cat, (n, k) in EINSUM.items():
        ps += einsum_programs(f"einsum{cat}", seeds(cat, n), k)
    ps += [stride_program(sd) for sd in seeds(10, 150)]
    ps += [conv_read_program(sd, offset=False) for sd in seeds(11, 200)]
    ps += [conv_read_program(sd, offset=True) for sd in seeds(12, 120)]
    ps += [inconsistent_program(sd) for sd in seeds(13, 100)]
    ps += [pointwise_program(sd) for sd in seeds(20, 90 + 80 + 40 + 50)]
    ps += [grad_program(sd) for sd in seeds(30, 100 + 8)]
    ps += [max_grad_program(sd, ties=t) for sd in seeds(31, 30) for t in (False, True)]
    return ps


def test_at_least_two_thousand_programs() -> None:
    assert len(all_programs()) >= 2000 * min(1.0, FUZZ_N)


def test_generators_cover_the_features() -> None:
    tags = Counter(t for p in all_programs() for t in p.tags)
    want = {"diagonal", "diagonal_write", "fixed_read", "fixed_write", "result_only",
            "row_var", "rows", "multi", "single", "size0", "size1", "bcast", "ops1", "ops2",
            "ops3", "ops4", "ops5", "ops6", "read", "write", "param", "max", "offset",
            "compose", "shared", "pyconst", "ties", *LEAVES}
    missing = {t for t in want if tags[t] < 3}
    assert not missing, (missing, tags)


def test_generators_are_deterministic() -> None:
    assert all_programs()[::97] == all_programs()[::97]
