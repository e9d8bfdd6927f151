"""`oc.einsum` with 4+ operands (values vs numpy.einsum, gradients vs float64 central finite
differences), and `oc.einsum_max` gradients with tied maxima: the incoming gradient is
split equally among tied positions (NumPy reference), in max-reduce and tropical form.

Finite differences: `oc.testing.check_grads` (one float64 context; each perturbed input is
set and the compiled forward rerun)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import ocannl_ast as oc

EPS = 1e-6


def _params(arrays: list[np.ndarray]) -> list[oc.Tensor]:
    return [oc.param(f"p{k}", init=a.copy()) for k, a in enumerate(arrays)]


def _weighted(y: oc.Tensor, W: np.ndarray) -> oc.Tensor:
    letters = "abcdefgh"[:W.ndim]
    return oc.einsum(f"{letters};{letters}=>", y, oc.ndarray(W))


def _check_grads(fn: Callable[..., oc.Tensor], arrays: list[np.ndarray],
                 expected: list[np.ndarray] | None = None) -> None:
    """`fn(*params)`, a scalar loss: its gradients against float64 central differences, and
    (through `oc.value_and_grad`) against the NumPy gradients `expected`."""
    oc.testing.check_grads(fn, arrays, eps=EPS, rtol=1e-6, atol=1e-7)
    if expected is None:
        return
    ps = _params(arrays)
    _, grads = oc.value_and_grad(fn(*ps), ps, ctx=oc.Context(precision="float64"))
    assert len(grads) == len(expected)
    for k, (g, e) in enumerate(zip(grads, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12,
                                   err_msg=f"gradient of operand {k} vs NumPy")


# ---- einsum arity --------------------------------------------------------------------------

ARITY_CASES = [
    ("ij;jk;kl;l=>i", "ij,jk,kl,l->i", [(2, 3), (3, 4), (4, 2), (2,)]),
    ("i;j;k;l=>ijkl", "i,j,k,l->ijkl", [(2,), (3,), (2,), (2,)]),
    ("ab;bc;cd;de;e=>a", "ab,bc,cd,de,e->a", [(2, 3), (3, 2), (2, 3), (3, 2), (2,)]),
    ("ab;bc;cd;de;ef;f=>a", "ab,bc,cd,de,ef,f->a",
     [(2, 2), (2, 3), (3, 2), (2, 2), (2, 3), (3,)]),
    ("ij;j;j;ij;i;i=>", "ij,j,j,ij,i,i->", [(2, 3), (3,), (3,), (2, 3), (2,), (2,)]),
]


@pytest.mark.parametrize(("spec", "np_spec", "dims"), ARITY_CASES,
                         ids=[c[0] for c in ARITY_CASES])
def test_einsum_many_operands_values(spec: str, np_spec: str,
                                     dims: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(len(dims))
    arrays = [rng.standard_normal(d) for d in dims]
    y = oc.einsum(spec, *[oc.ndarray(a) for a in arrays])
    got = oc.eval(y, ctx=oc.Context(precision="float64"))
    np.testing.assert_allclose(got.reshape(np.shape(np.einsum(np_spec, *arrays))),
                               np.einsum(np_spec, *arrays), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("spec", "np_spec", "dims"), ARITY_CASES,
                         ids=[c[0] for c in ARITY_CASES])
def test_einsum_many_operands_gradients(spec: str, np_spec: str,
                                        dims: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(10 + len(dims))
    arrays = [rng.standard_normal(d) for d in dims]
    ref = np.einsum(np_spec, *arrays)
    W = rng.standard_normal(ref.shape) if ref.ndim else None

    def loss(*ps: oc.Tensor) -> oc.Tensor:
        y = oc.einsum(spec, *ps)
        return y if W is None else _weighted(y, W)

    _check_grads(loss, arrays)


def test_einsum_four_operands_same_param() -> None:
    a = np.array([0.5, -1.0, 2.0])
    (p,) = _params([a])
    loss = oc.einsum("i;i;i;i=>", p, p, p, p)
    ctx = oc.Context(precision="float64")
    value, (g,) = oc.value_and_grad(loss, [p], ctx=ctx)
    assert float(value) == pytest.approx(float((a ** 4).sum()), rel=1e-12)
    np.testing.assert_allclose(g, 4 * a ** 3, rtol=1e-12)


# ---- einsum_max with ties ------------------------------------------------------------------

def _split_max_grad(a: np.ndarray, axis: int, W: np.ndarray) -> np.ndarray:
    """NumPy reference: W at each max position divided by the number of tied maxima."""
    mask = a == a.max(axis=axis, keepdims=True)
    return np.expand_dims(W, axis) * mask / mask.sum(axis=axis, keepdims=True)


MAX_CASES = [
    ("ij=>i", 1, np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [5.0, -1.0, 4.0, 1.0]])),
    ("ij=>j", 0, np.array([[1.0, 3.0, -2.0], [1.0, 0.5, -2.0], [0.0, 3.0, -2.0]])),
    ("ijk=>ik", 1, np.array([[[1.0, 2.0], [1.0, 0.0]], [[-3.0, 4.0], [-3.0, 4.0]]])),
]


@pytest.mark.parametrize(("spec", "axis", "a"), MAX_CASES, ids=[c[0] for c in MAX_CASES])
def test_einsum_max_reduce_ties_split_equally(spec: str, axis: int, a: np.ndarray) -> None:
    (p,) = _params([a])
    y = oc.einsum_max(spec, p)
    W = np.random.default_rng(3).standard_normal(np.delete(a.shape, axis))
    ctx = oc.Context(precision="float64")
    np.testing.assert_array_equal(ctx.eval(y), a.max(axis=axis))
    _, (g,) = oc.value_and_grad(_weighted(y, W), [p], ctx=ctx)
    np.testing.assert_allclose(g, _split_max_grad(a, axis, W), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g.sum(axis=axis), W, rtol=1e-12)  # no double counting


def _tropical_grads(a: np.ndarray, b: np.ndarray, W: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
    s = a[:, :, None] + b[None, :, :]
    mask = s == s.max(axis=1, keepdims=True)
    share = W[:, None, :] * mask / mask.sum(axis=1, keepdims=True)
    return share.sum(axis=2), share.sum(axis=0)


def test_einsum_max_tropical_ties_split_equally() -> None:
    a = np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 2.0]])
    b = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, -1.0]])
    pa, pb = _params([a, b])
    y = oc.einsum_max("ik;kj=>ij", pa, pb)
    W = np.array([[1.0, -2.0], [0.5, 3.0]])
    ctx = oc.Context(precision="float64")
    np.testing.assert_array_equal(ctx.eval(y), (a[:, :, None] + b[None, :, :]).max(1))
    s = a[:, :, None] + b[None, :, :]
    assert ((s == s.max(1, keepdims=True)).sum(1) > 1).any()  # the case has ties
    _, (ga, gb) = oc.value_and_grad(_weighted(y, W), [pa, pb], ctx=ctx)
    ea, eb = _tropical_grads(a, b, W)
    np.testing.assert_allclose(ga, ea, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gb, eb, rtol=1e-12, atol=1e-12)


def test_einsum_max_reduce_of_replicated_values_matches_finite_differences() -> None:
    # every entry of row i equals p[i]: all tied, yet max is exactly p[i] (derivative 1)
    W = np.array([1.0, -0.5, 2.0])

    def loss(p: oc.Tensor) -> oc.Tensor:
        rep = oc.einsum("i;j=>ij", p, oc.ndarray(np.ones(4)))
        return _weighted(oc.einsum_max("ij=>i", rep), W)

    _check_grads(loss, [np.array([0.3, -1.2, 2.0])], expected=[W])


def test_einsum_max_tropical_of_replicated_values_matches_finite_differences() -> None:
    # s[i, k, j] = p[i] + q[j] for every k: all k tied, max is exactly p[i] + q[j]
    W = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]])

    def loss(p: oc.Tensor, q: oc.Tensor) -> oc.Tensor:
        a = oc.einsum("i;k=>ik", p, oc.ndarray(np.ones(3)))
        b = oc.einsum("k;j=>kj", oc.ndarray(np.ones(3)), q)
        return _weighted(oc.einsum_max("ik;kj=>ij", a, b), W)

    _check_grads(loss, [np.array([0.3, -1.2]), np.array([1.0, 0.0, -0.5])],
                 expected=[W.sum(1), W.sum(0)])
