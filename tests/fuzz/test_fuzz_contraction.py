"""Differential fuzzing of contractions large enough for the C backend's contraction
kernel (M, N, K >= 4 and M*N*K >= 16^3 run as kernel calls, see docs/generated_code.md):
random two-operand einsums with batch, row (M), column (N) and summed (K) label groups in
random axis orders, against `numpy.einsum` in float64. The public API only; every case is
also checked to really use the kernel (or, when too small, the loops) as its size says."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from fuzz_harness import scaled

import ocannl_ast as oc
from ocannl_ast.backends import c_contraction

LABELS = "abcdefghpqrstuvw"


def _case(rng: random.Random) -> tuple[str, dict[str, int], dict[str, str]]:
    """A spec `x;y=>c` with its label sizes and each label's group."""
    pool = list(LABELS)
    rng.shuffle(pool)
    groups = {"m": rng.randint(1, 2), "n": rng.randint(1, 2), "k": rng.randint(1, 2),
              "batch": rng.randint(0, 1)}
    role: dict[str, str] = {}
    for g, count in groups.items():
        for _ in range(count):
            role[pool.pop()] = g
    sizes = {lbl: rng.choice([1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 23, 33]) for lbl in role}
    while math.prod(sizes.values()) > 150_000:  # keep each case quick
        big = max(sizes, key=lambda lbl: sizes[lbl])
        sizes[big] = max(1, sizes[big] // 2)

    def row(groups_in: str) -> str:
        axes = [lbl for lbl, g in role.items() if g in groups_in]
        rng.shuffle(axes)
        return "".join(axes)

    return f"{row('m k batch')};{row('k n batch')}=>{row('m n batch')}", sizes, role


def _uses_kernel(sizes: dict[str, int], role: dict[str, str]) -> bool:
    m, n, k = (math.prod(s for lbl, s in sizes.items() if role[lbl] == g) for g in "mnk")
    return min(m, n, k) >= c_contraction.MIN_EXTENT and m * n * k >= c_contraction.MIN_WORK


@pytest.mark.parametrize("group", range(4))
def test_fuzz_contractions_match_numpy(group: int) -> None:
    rng = random.Random(7000 + group)
    cases = []
    for _ in range(scaled(12)):
        spec, sizes, role = _case(rng)
        lhs, out = spec.split("=>")
        xs, ys = lhs.split(";")
        data = np.random.default_rng(rng.randrange(1 << 30))
        xv = data.standard_normal([sizes[lbl] for lbl in xs])
        yv = data.standard_normal([sizes[lbl] for lbl in ys])
        t = oc.einsum(spec, oc.ndarray(xv), oc.ndarray(yv))
        cases.append((spec, sizes, role, t, np.einsum(f"{xs},{ys}->{out}", xv, yv)))
    ctx = oc.Context(precision="float64")
    routine = ctx.compile([t.forward for *_, t, _ in cases])
    routine()
    src = oc.render([t.forward for *_, t, _ in cases], precision="float64")
    kernels = src.count("/* contraction kernel:")
    assert kernels == sum(_uses_kernel(s, r) for _, s, r, _, _ in cases), src[:2000]
    for spec, sizes, _, t, want in cases:
        np.testing.assert_allclose(ctx.get(t), want, rtol=1e-10, atol=1e-10,
                                   err_msg=f"{spec} {sizes}")


def test_the_fuzz_reaches_the_kernel() -> None:
    rng = random.Random(7000)
    used = sum(_uses_kernel(s, r) for _, s, r in (_case(rng) for _ in range(48)))
    assert used >= 10
