"""The contraction kernel's batched call (one `ocannl_mm_runb` over a product's batch loops,
as attention's per-(batch, head) products) and its small path reading B in place or over
several K blocks, from the user's side: values against NumPy, gradients against float64
central differences, and the same bits as the blocked path (the small path switched off)
and as any thread count."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import ocannl_ast as oc
from ocannl_ast.backends import c_contraction, c_contraction_kernel, c_region

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")

BATCHED = "if (ocannl_mm_runb_"


def _data(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)


def _tol(k: int, precision: str) -> dict[str, float]:
    eps = 6e-8 if precision == "float32" else 1.2e-16
    return {"rtol": 0.0, "atol": 8 * eps * np.sqrt(k) * k}


# (spec, a's shape, b's shape, NumPy's spec): attention's products and their gradients'
# layouts (B transposed, B in place, A transposed), several batch axes, N past whole vectors
ATTENTION = [
    ("bhqd;bhkd=>bhqk", (3, 4, 32, 16), (3, 4, 32, 16), "bhqd,bhkd->bhqk"),  # q . k^T
    ("bhqk;bhkd=>bhqd", (3, 4, 32, 32), (3, 4, 32, 16), "bhqk,bhkd->bhqd"),  # w . v
    ("bhqk;bhqd=>bhkd", (2, 4, 32, 32), (2, 4, 32, 16), "bhqk,bhqd->bhkd"),  # w^T . dy
    ("bqhd;bkhd=>bhqk", (2, 17, 3, 8), (2, 19, 3, 8), "bqhd,bkhd->bhqk"),  # heads inside
    ("bij;bjk=>bik", (5, 9, 300, ), (5, 300, 24), "bij,bjk->bik"),  # K past one block
    ("bij;bjk=>bik", (4, 7, 260), (4, 260, 13), "bij,bjk->bik"),  # ... B packed
]


def _run(spec: str, a: np.ndarray, b: np.ndarray, precision: str
         ) -> tuple[np.ndarray, str]:
    dtype = np.float32 if precision == "float32" else np.float64
    y = oc.einsum(spec, oc.ndarray(a.astype(dtype)), oc.ndarray(b.astype(dtype)))
    return oc.Context(precision=precision).eval(y), oc.render(y.forward, precision=precision)


@pytest.mark.parametrize(("spec", "sa", "sb", "np_spec"), ATTENTION)
@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_batched_products_match_numpy_and_the_blocked_bits(
        spec: str, sa: tuple[int, ...], sb: tuple[int, ...], np_spec: str, precision: str,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(c_contraction, "MIN_WORK", 1)
    a, b = _data(len(spec), sa), _data(len(np_spec), sb)
    got, src = _run(spec, a, b, precision)
    assert src.count(BATCHED) == 1 and "for (" not in src.split(BATCHED)[0].split("{\n")[-1]
    want = np.einsum(np_spec, a.astype(got.dtype).astype(np.float64),
                     b.astype(got.dtype).astype(np.float64))
    np.testing.assert_allclose(got, want, **_tol(max(sa[-1], sb[-2], 32), precision))
    monkeypatch.setattr(c_contraction_kernel, "SMALL_BYTES", 0)
    blocked, _ = _run(spec, a, b, precision)
    assert got.tobytes() == blocked.tobytes()


@pytest.mark.parametrize("threads", ["2", "3"])
def test_batched_cells_shared_between_threads_keep_the_bits(
        threads: str, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b = _data(1, (6, 4, 32, 16)), _data(2, (6, 4, 32, 16))
    spec = "bhqd;bhkd=>bhqk"
    base, src1 = _run(spec, a, b, "float32")
    assert ", 1, ocannl_mmd0, ocannl_mmd0b)" in src1
    monkeypatch.setenv("OCANNL_AST_THREADS", threads)
    monkeypatch.setattr(c_contraction, "PARALLEL_BATCH_WORK", 1)
    got, src = _run(spec, a, b, "float32")  # by the team of the routine's parallel region
    assert f", -{threads}, ocannl_mmd0, ocannl_mmd0b)" in src
    assert got.tobytes() == base.tobytes()
    monkeypatch.setattr(c_region, "usable", lambda parts: False)  # its own threads
    got, src = _run(spec, a, b, "float32")
    assert f", {threads}, ocannl_mmd0, ocannl_mmd0b)" in src
    assert got.tobytes() == base.tobytes()


def test_attention_scores_gradients_through_the_batched_call() -> None:
    coef = oc.ndarray(_data(3, (2, 3, 9, 9)))
    rhs = oc.ndarray(_data(4, (2, 3, 9, 5)))

    def f(q: oc.Tensor, k: oc.Tensor) -> oc.Tensor:
        s = oc.einsum("bhqd;bhkd=>bhqk", q, k)
        o = oc.einsum("bhqk;bhkd=>bhqd", s * coef, rhs)
        return oc.einsum("bhqd;bhqd=>", o, o)

    saved = c_contraction.MIN_WORK
    c_contraction.MIN_WORK = 1
    try:
        q, k = (oc.param(n, init=_data(i, (2, 3, 9, 4))) for n, i in (("q", 5), ("k", 6)))
        assert oc.render(oc.grad_update(f(q, k))).count(BATCHED) >= 3
        oc.testing.check_grads(f, [_data(5, (2, 3, 9, 4)), _data(6, (2, 3, 9, 4))])
    finally:
        c_contraction.MIN_WORK = saved
