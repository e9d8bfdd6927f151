"""Einsum broadcasts an operand's size-1 axes against the label's size (seed 002: einsum
is Pointwise_bin-like; NumPy does the same): values vs numpy.einsum, gradients vs float64
central finite differences, einsum_max, and the true mismatches that stay located errors."""

from __future__ import annotations

import os

import numpy as np
import pytest

import ocannl_ast as oc

HERE = os.path.basename(__file__)
RNG = np.random.default_rng(20)

CASES = [
    ("i;i=>i", [(1,), (2,)]),
    ("i;i=>i", [(3,), (1,)]),
    ("ij;ij=>ij", [(1, 3), (2, 3)]),
    ("ij;ij=>ij", [(2, 1), (1, 3)]),
    ("ij;jk=>ik", [(2, 1), (4, 3)]),
    ("ij;j=>i", [(2, 3), (1,)]),
    ("ij;ij=>", [(1, 1), (2, 3)]),
    ("t;ctc;t=>tc", [(1,), (2, 1, 2), (2,)]),
    ("i;i;i=>i", [(1,), (4,), (1,)]),
    ("...i;...i=>...i", [(1, 3), (2, 3)]),
    ("...i;...i=>...", [(2, 1, 3), (1, 4, 3)]),
    ("ij;jk=>ikj", [(2, 1), (1, 3)]),
]


def _np(spec: str) -> str:
    return spec.replace(";", ",").replace("=>", "->")


@pytest.mark.parametrize(("spec", "shapes"), CASES)
def test_values_match_numpy_einsum(spec: str, shapes: list[tuple[int, ...]]) -> None:
    arrs = [RNG.standard_normal(s) for s in shapes]
    got = oc.eval(oc.einsum(spec, *map(oc.ndarray, arrs)), precision="float64")
    np.testing.assert_allclose(got, np.einsum(_np(spec), *arrs), rtol=1e-12, atol=1e-12)


def test_label_only_bound_by_size_one_closes_to_one() -> None:
    t = oc.einsum("i;i=>i", oc.ndarray([2.0]), oc.ndarray([3.0]))
    oc.infer_shapes(t)
    assert t.shape.output == (1,)
    np.testing.assert_allclose(oc.eval(t), [6.0])


def test_result_dims_are_the_labels_dims() -> None:
    t = oc.einsum("ij;ij=>ij", oc.ndarray(np.ones((1, 3))), oc.ndarray(np.ones((2, 1))))
    oc.infer_shapes(t)
    assert t.shape.output == (2, 3)  # never "smaller than expected"


@pytest.mark.parametrize(("spec", "shapes"), [
    ("i;i=>i", [(1,), (3,)]),
    ("ij;jk=>ik", [(2, 1), (4, 3)]),
    ("ij;ij=>i", [(1, 3), (2, 1)]),
    ("...i;...i=>...i", [(1, 2), (3, 2)]),
])
def test_gradients_sum_over_the_broadcast_axis(spec: str, shapes: list[tuple[int, ...]]) -> None:
    arrs = [RNG.standard_normal(s) for s in shapes]
    out_shape = np.einsum(_np(spec), *arrs).shape
    W = RNG.standard_normal(out_shape)
    letters = "pqrs"[:len(out_shape)]

    def loss_of(*ps: oc.Tensor) -> oc.Tensor:
        return oc.einsum(f"{letters};{letters}=>", oc.einsum(spec, *ps), oc.ndarray(W))

    oc.testing.check_grads(loss_of, arrs, rtol=1e-6, atol=1e-7)


def test_einsum_max_broadcasts() -> None:
    a, b = RNG.standard_normal((1, 3)), RNG.standard_normal((2, 3))
    got = oc.eval(oc.einsum_max("ij;ij=>i", oc.ndarray(a), oc.ndarray(b)), precision="float64")
    np.testing.assert_allclose(got, np.max(a + b, axis=1))
    got1 = oc.eval(oc.einsum_max("ij;ij=>j", oc.ndarray(a), oc.ndarray(b)),
                   precision="float64")
    np.testing.assert_allclose(got1, np.max(a + b, axis=0))


def test_einsum_max_gradient_of_broadcast_operand() -> None:
    a = np.array([[0.5]])
    b = np.array([[1.0, 3.0], [2.0, -1.0]])
    pa = oc.param("mx_a", output_dims=[1, 1], init=a)
    out = oc.einsum_max("ij;ij=>i", pa, oc.ndarray(b))
    _, (g,) = oc.value_and_grad(oc.einsum("i=>", out), [pa], precision="float64")
    np.testing.assert_allclose(g, [[2.0]])  # each of the 2 rows' max reads a[0, 0]


def test_fixed_index_read_with_size_one_operand_axis() -> None:
    a, b = RNG.standard_normal((2, 1)), RNG.standard_normal((3, 4))
    got = oc.eval(oc.einsum("ij;1j=>j", oc.ndarray(a), oc.ndarray(b)), precision="float64")
    np.testing.assert_allclose(got, a[:, 0].sum() * b[1, :])


@pytest.mark.parametrize(("spec", "shapes", "fact"), [
    ("i;i=>i", [(2,), (3,)], "mismatch"),
    ("ij;ij=>ij", [(2, 3), (3, 3)], "mismatch"),
    ("ii=>i", [(1, 3)], "mismatch"),  # a diagonal does not broadcast against itself
    ("ij;jk=>ik", [(2, 3), (2, 4)], "mismatch"),
    ("...i;...i=>...i", [(2, 3), (3, 3)], "broadcast"),
])
def test_true_mismatches_are_located_shape_errors(spec: str, shapes: list[tuple[int, ...]],
                                                   fact: str) -> None:
    arrs = [oc.ndarray(np.ones(s)) for s in shapes]
    with pytest.raises(oc.ShapeError) as info:
        oc.infer_shapes(oc.einsum(spec, *arrs))
    msg = str(info.value)
    assert HERE in msg and spec in msg, msg


def test_affine_kernel_label_of_size_one_is_a_kernel_not_a_broadcast() -> None:
    x, w = RNG.standard_normal(5), RNG.standard_normal(1)
    got = oc.eval(oc.einsum("2*o<+k; k => o", oc.ndarray(x), oc.ndarray(w)),
                  precision="float64")
    np.testing.assert_allclose(got, x[0::2] * w[0])


def test_undetermined_parameter_under_a_label_is_an_error() -> None:
    w = oc.param("bc_undet")
    with pytest.raises(oc.ShapeError, match="bc_undet"):
        oc.infer_shapes(oc.einsum("i;i=>i", w, w))


def test_parameter_takes_the_labels_size() -> None:
    w = oc.param("bc_take")
    t = oc.einsum("ij;ij=>ij", oc.ndarray(np.ones((2, 3))), w)
    oc.infer_shapes(t)
    assert w.shape.output == (2, 3)
