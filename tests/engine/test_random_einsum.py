"""Random einsum specs (seeded) run through generated C and compared with `numpy.einsum`:
1-3 operands, single-letter labels, sizes 1-4 (size-one axes included), repeated labels
within an operand (diagonals) and labels summed out. Several einsums share one compiled
routine to keep the number of gcc calls small."""

from __future__ import annotations

import random
from dataclasses import dataclass

import numpy as np
import pytest

import ocannl_ast as oc

N_GROUPS = 20
PER_GROUP = 16  #: 320 output-only specs in all
N_ROW_GROUPS = 8
PER_ROW_GROUP = 12  #: 96 specs with batch|input->output rows


@dataclass(frozen=True)
class Case:
    operands: tuple[str, ...]  #: labels of each operand, in NumPy axis order
    result: str
    sizes: dict[str, int]
    spec: str  #: the OCANNL spec
    arrays: tuple[np.ndarray, ...]
    splits: tuple[tuple[int, int], ...] = ()  #: (batch_axes, input_axes) per operand


def _labels_and_sizes(rng: random.Random) -> tuple[list[str], dict[str, int]]:
    labels = rng.sample("abcdefghkmnpqrstuvwxyz", rng.randint(1, 5))
    return labels, {lbl: rng.randint(1, 4) for lbl in labels}


def _operands(rng: random.Random, labels: list[str], min_rank: int = 1) -> list[str]:
    ops: list[str] = []
    for _ in range(rng.randint(1, 3)):
        rank = rng.randint(min_rank if ops else 1, 4)
        ops.append("".join(rng.choice(labels) for _ in range(rank)))
    return ops


def _result(rng: random.Random, ops: list[str]) -> str:
    used = sorted(set("".join(ops)))
    out = [lbl for lbl in used if rng.random() < 0.55]
    rng.shuffle(out)
    return "".join(out)


def _arrays(nrng: np.random.Generator, ops: list[str], sizes: dict[str, int]
            ) -> tuple[np.ndarray, ...]:
    return tuple(nrng.standard_normal([sizes[c] for c in o]) for o in ops)


def output_only_case(seed: int) -> Case:
    rng = random.Random(seed)
    labels, sizes = _labels_and_sizes(rng)
    ops = _operands(rng, labels)
    out = _result(rng, ops)
    spec = ";".join(ops) + "=>" + out
    return Case(tuple(ops), out, sizes, spec, _arrays(np.random.default_rng(seed), ops, sizes))


def _split(rng: random.Random, labels: str) -> tuple[str, str, str, int, int]:
    """Split an operand's labels (NumPy order = batch, output, input) into three rows."""
    n = len(labels)
    nb = rng.randint(0, n)
    ni = rng.randint(0, n - nb)
    b, o, i = labels[:nb], labels[nb:n - ni], labels[n - ni:]
    return b, o, i, nb, ni


def rows_case(seed: int) -> Case:
    rng = random.Random(10_000 + seed)
    labels, sizes = _labels_and_sizes(rng)
    ops = _operands(rng, labels, min_rank=0)  # "|->" is an operand without axes
    out = _result(rng, ops)
    texts, splits = [], []
    for o in ops:
        b, out_, i, nb, ni = _split(rng, o)
        texts.append(f"{b}|{i}->{out_}")
        splits.append((nb, ni))
    rb, ro, ri, _, _ = _split(rng, out)
    spec = ";".join(texts) + "=>" + f"{rb}|{ri}->{ro}"
    arrays = _arrays(np.random.default_rng(10_000 + seed), ops, sizes)
    return Case(tuple(ops), rb + ro + ri, sizes, spec, arrays, tuple(splits))


def _check_group(cases: list[Case]) -> None:
    results = []
    for c in cases:
        splits = c.splits or tuple((0, 0) for _ in c.operands)
        tensors = [oc.ndarray(a, batch_axes=nb, input_axes=ni)
                   for a, (nb, ni) in zip(c.arrays, splits, strict=True)]
        results.append(oc.einsum(c.spec, *tensors))
    ctx = oc.Context(precision="float64")
    ctx.compile([t.forward for t in results])()
    bad = []
    for c, t in zip(cases, results, strict=True):
        want = np.einsum(",".join(c.operands) + "->" + c.result, *c.arrays)
        got = ctx.get(t)
        if got.shape != want.shape or not np.allclose(got, want, rtol=1e-9, atol=1e-9):
            bad.append(f"{c.spec} sizes={c.sizes}: got {got.shape}, want {want.shape}")
    assert not bad, "\n".join(bad)


def test_generator_covers_the_interesting_cases() -> None:
    cases = [output_only_case(s) for s in range(N_GROUPS * PER_GROUP)]
    assert len({c.spec for c in cases}) > 250
    assert any(len(set(o)) < len(o) for c in cases for o in c.operands)  # diagonals
    assert any(set("".join(c.operands)) - set(c.result) for c in cases)  # summed out
    assert any(1 in c.sizes.values() for c in cases)  # size-one axes
    assert {len(c.operands) for c in cases} == {1, 2, 3}
    assert any(c.result == "" for c in cases)  # full reductions


@pytest.mark.parametrize("group", range(N_GROUPS))
def test_random_output_only_einsums(group: int) -> None:
    _check_group([output_only_case(group * PER_GROUP + k) for k in range(PER_GROUP)])


@pytest.mark.parametrize("group", range(N_ROW_GROUPS))
def test_random_einsums_with_rows(group: int) -> None:
    _check_group([rows_case(group * PER_ROW_GROUP + k) for k in range(PER_ROW_GROUP)])


@pytest.mark.parametrize("seed", range(12))
def test_random_einsum_single_routine_via_eval(seed: int) -> None:
    """A few through the one-call public path, `oc.eval`."""
    c = output_only_case(100_000 + seed)
    got = oc.eval(oc.einsum(c.spec, *map(oc.ndarray, c.arrays)), precision="float64")
    want = np.einsum(",".join(c.operands) + "->" + c.result, *c.arrays)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
