"""Gradients of every tensor operation against float64 central finite differences.

Oracles: NumPy for forward values, central finite differences (each perturbed loss computed
by a fresh `oc.eval` with the perturbed parameter init values) for gradients, and explicit
NumPy gradients where finite differences do not apply (stop_gradient, comparisons).

Each case reduces the operation's output to a scalar with fixed random weights:
``loss = einsum("<rows>;<rows>=>", out, ndarray(W))``.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from fd_util import central_differences

import ocannl_ast as oc

RTOL = 1e-6
ATOL = 1e-8
EPS = 1e-6


@dataclass
class P:
    """A parameter's initial values and how its numpy axes split into batch/output/input."""

    arr: np.ndarray
    batch_axes: int = 0
    input_axes: int = 0

    def make(self, name: str, arr: np.ndarray) -> oc.Tensor:
        d = arr.shape
        nb, ni = self.batch_axes, self.input_axes
        no = len(d) - nb - ni
        return oc.param(name, batch_dims=list(d[:nb]), output_dims=list(d[nb:nb + no]),
                        input_dims=list(d[nb + no:]), init=arr.copy())


def rows(t: oc.Tensor) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    oc.infer_shapes(t)
    return tuple(t.shape.batch), tuple(t.shape.output), tuple(t.shape.input)


def row_spec(t: oc.Tensor) -> str:
    """A full shape spec "b|i->o" naming each of the tensor's axes by a distinct letter."""
    b, o, i = rows(t)
    letters = iter(string.ascii_lowercase)
    bs = "".join(next(letters) for _ in b)
    os_ = "".join(next(letters) for _ in o)
    is_ = "".join(next(letters) for _ in i)
    return f"{bs}|{is_}->{os_}"


def weighted_sum(out: oc.Tensor, W: np.ndarray) -> oc.Tensor:
    b, o, i = rows(out)
    assert W.shape == b + o + i
    spec = row_spec(out)
    w = oc.ndarray(W, batch_axes=len(b), input_axes=len(i), label="W")
    return oc.einsum(f"{spec};{spec}=>", out, w)


def out_weights(out: oc.Tensor, seed: int = 1234) -> np.ndarray:
    b, o, i = rows(out)
    return np.random.default_rng(seed).standard_normal(b + o + i)


def _scalar(x: Any) -> float:
    a = np.asarray(x, dtype=np.float64)
    assert a.size == 1, a.shape
    return float(a.reshape(()))


def check_grads(build_fn: Callable[..., oc.Tensor], param_arrays: Sequence[Any], *,
                np_fn: Callable[..., np.ndarray] | None = None,
                expected_grads: Sequence[np.ndarray] | None = None,
                fd: bool = True, rtol: float = RTOL, atol: float = ATOL,
                eps: float = EPS) -> None:
    """Build `build_fn(*params)` from fresh params initialized with `param_arrays`, reduce it
    with random weights, and compare `oc.value_and_grad` (float64) with NumPy (`np_fn`, the
    forward in layout batch, output, input) and central finite differences."""
    specs = [a if isinstance(a, P) else P(np.asarray(a, dtype=np.float64))
             for a in param_arrays]
    base = [np.asarray(s.arr, dtype=np.float64) for s in specs]
    W_box: list[np.ndarray] = []

    def build(arrays: list[np.ndarray]) -> tuple[oc.Tensor, list[oc.Tensor], oc.Tensor]:
        ps = [s.make(f"p{k}", a) for k, (s, a) in enumerate(zip(specs, arrays))]
        out = build_fn(*ps)
        if not W_box:
            W_box.append(out_weights(out))
        return weighted_sum(out, W_box[0]), ps, out

    loss, ps, out = build(base)
    value, grads = oc.value_and_grad(loss, ps, precision="float64")
    assert len(grads) == len(ps)
    for g, a in zip(grads, base):
        assert np.asarray(g).shape == a.shape
    W = W_box[0]
    if np_fn is not None:
        ref = np.asarray(np_fn(*[a.copy() for a in base]), dtype=np.float64)
        assert ref.shape == W.shape, (ref.shape, W.shape)
        # the forward value itself, through a separate evaluation
        np.testing.assert_allclose(oc.eval(out, precision="float64"), ref, rtol=1e-12,
                                   atol=1e-12)
        np.testing.assert_allclose(_scalar(value), float((ref * W).sum()), rtol=1e-12,
                                   atol=1e-12)
    if expected_grads is not None:
        for k, (g, e) in enumerate(zip(grads, expected_grads)):
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol,
                                       err_msg=f"gradient of param {k} vs NumPy")
    if not fd:
        return

    # All 2N perturbed copies of the graph (fresh params each, initialized with perturbed
    # values) and the unperturbed one are evaluated by one `oc.eval`.
    base_loss, nums = central_differences(lambda arrays: build(arrays)[0], base, eps)
    assert base_loss == pytest.approx(_scalar(value), rel=1e-12, abs=1e-12)
    for k, num in enumerate(nums):
        np.testing.assert_allclose(grads[k], num, rtol=rtol,
                                   atol=atol * max(1.0, np.abs(num).max()) + 1e-7,
                                   err_msg=f"gradient of param {k} vs finite differences")


def rnd(*shape: int, seed: int = 0, low: float | None = None, high: float | None = None
        ) -> np.ndarray:
    r = np.random.default_rng(seed + 97 * len(shape) + sum(shape))
    if low is None:
        return r.standard_normal(shape)
    return r.uniform(low, high, shape)


# ---- binary pointwise ----------------------------------------------------------------------

def test_add() -> None:
    check_grads(lambda a, b: a + b, [rnd(2, 2), rnd(2, 2, seed=1)], np_fn=lambda a, b: a + b)


def test_add_broadcast_vector_over_matrix() -> None:
    # b has only the trailing output axis: broadcasts over the leading one, its gradient sums
    check_grads(lambda a, b: a + b, [rnd(2, 3), rnd(3, seed=1)], np_fn=lambda a, b: a + b)


def test_add_number() -> None:
    check_grads(lambda a: 1.5 + a + 2.0, [rnd(3)], np_fn=lambda a: a + 3.5)


def test_sub() -> None:
    check_grads(lambda a, b: a - b, [rnd(2, 2), rnd(2, 2, seed=1)], np_fn=lambda a, b: a - b)


def test_rsub_number() -> None:
    check_grads(lambda a: 1.0 - a, [rnd(3)], np_fn=lambda a: 1.0 - a)


def test_mul() -> None:
    check_grads(lambda a, b: a * b, [rnd(2, 2), rnd(2, 2, seed=1)], np_fn=lambda a, b: a * b)


def test_mul_broadcast_and_number() -> None:
    check_grads(lambda a, b: 3.0 * (a * b), [rnd(2, 3), rnd(3, seed=1)],
                np_fn=lambda a, b: 3.0 * a * b)


def test_mul_same_operand() -> None:
    check_grads(lambda a: a * a, [rnd(2, 2)], np_fn=lambda a: a * a)


def test_div() -> None:
    check_grads(lambda a, b: a / b, [rnd(2, 2), rnd(2, 2, seed=1, low=0.5, high=2.0)],
                np_fn=lambda a, b: a / b)


def test_rdiv_number() -> None:
    check_grads(lambda a: 2.0 / a, [rnd(3, low=0.5, high=2.0)], np_fn=lambda a: 2.0 / a)


def test_pow_both_params() -> None:
    check_grads(lambda a, b: a ** b, [rnd(2, 2, low=0.5, high=2.0), rnd(2, 2, seed=1)],
                np_fn=lambda a, b: a ** b)


def test_pow_number_exponent() -> None:
    check_grads(lambda a: a ** 3.0, [rnd(2, 2, low=0.5, high=2.0)], np_fn=lambda a: a ** 3.0)


def test_pow_number_base() -> None:
    check_grads(lambda a: 2.0 ** a, [rnd(3)], np_fn=lambda a: 2.0 ** a)


# ---- compose -----------------------------------------------------------------------------

def test_compose_matrix_vector() -> None:
    check_grads(lambda w, x: w @ x, [P(rnd(2, 3), input_axes=1), rnd(3, seed=1)],
                np_fn=lambda w, x: w @ x)


def test_compose_matrix_matrix() -> None:
    # (out 2, in 3) composed with (out 3, in 2): out 2, in 2
    check_grads(lambda a, b: a @ b, [P(rnd(2, 3), input_axes=1), P(rnd(3, 2, seed=1), input_axes=1)],
                np_fn=lambda a, b: a @ b)


def test_compose_batched_input() -> None:
    check_grads(lambda w, x: w @ x, [P(rnd(2, 3), input_axes=1), P(rnd(2, 3, seed=1), batch_axes=1)],
                np_fn=lambda w, x: np.einsum("oi,bi->bo", w, x))


def test_compose_mlp_layer() -> None:
    check_grads(lambda w, b, x: oc.tanh(w @ x + b),
                [P(rnd(2, 3), input_axes=1), rnd(2, seed=2), rnd(3, seed=1)],
                np_fn=lambda w, b, x: np.tanh(w @ x + b))


# ---- unary pointwise ----------------------------------------------------------------------

def test_neg() -> None:
    check_grads(lambda a: oc.neg(a), [rnd(2, 2)], np_fn=lambda a: -a)


def test_unary_minus_operator() -> None:
    check_grads(lambda a: -a, [rnd(2, 2)], np_fn=lambda a: -a)


def test_relu() -> None:
    a = np.array([[-1.5, -0.3, 0.2], [0.7, -2.0, 1.1]])  # away from the kink
    check_grads(lambda x: oc.relu(x), [a], np_fn=lambda x: np.maximum(x, 0.0))


def test_exp() -> None:
    check_grads(oc.exp, [rnd(2, 2)], np_fn=np.exp)


def test_log() -> None:
    check_grads(oc.log, [rnd(2, 2, low=0.3, high=3.0)], np_fn=np.log)


def test_tanh() -> None:
    check_grads(oc.tanh, [rnd(2, 2)], np_fn=np.tanh)


def test_sin() -> None:
    check_grads(oc.sin, [rnd(2, 2)], np_fn=np.sin)


def test_cos() -> None:
    check_grads(oc.cos, [rnd(2, 2)], np_fn=np.cos)


def test_sqrt() -> None:
    check_grads(oc.sqrt, [rnd(2, 2, low=0.3, high=3.0)], np_fn=np.sqrt)


def test_recip() -> None:
    a = np.array([[0.5, -1.5, 2.0], [-0.7, 1.2, 3.0]])
    check_grads(oc.recip, [a], np_fn=lambda x: 1.0 / x)


def test_unary_chain() -> None:
    check_grads(lambda a: oc.sin(oc.exp(a) * oc.cos(a)) + oc.sqrt(a * a + 1.0), [rnd(2, 2)],
                np_fn=lambda a: np.sin(np.exp(a) * np.cos(a)) + np.sqrt(a * a + 1.0))


# ---- where, comparisons, stop_gradient -------------------------------------------------

def test_where_constant_condition() -> None:
    cond = np.array([[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    check_grads(lambda a, b: oc.where(oc.ndarray(cond), a * a, oc.exp(b)),
                [rnd(2, 3), rnd(2, 3, seed=1)],
                np_fn=lambda a, b: np.where(cond != 0, a * a, np.exp(b)))


def test_where_condition_from_params() -> None:
    # the condition depends on a param (through a comparison): no gradient flows into it
    c = np.array([0.5, -0.4, 1.3, -2.0])
    a, b = rnd(4), rnd(4, seed=1)
    check_grads(lambda c_, a_, b_: oc.where(oc.lt(c_, 0.0), a_ * 2.0, b_ * b_), [c, a, b],
                np_fn=lambda c_, a_, b_: np.where(c_ < 0.0, a_ * 2.0, b_ * b_))


@pytest.mark.parametrize("name,npf", [
    ("lt", np.less), ("le", np.less_equal), ("eq", np.equal), ("ne", np.not_equal)])
def test_comparison_value_and_no_gradient(name: str, npf: Any) -> None:
    a = np.array([[1.0, 2.0, -1.0], [0.5, 3.0, 0.0]])
    b = np.array([[1.0, 1.0, 2.0], [0.5, -3.0, 0.0]])  # ties in three places
    cmp = getattr(oc, name)
    W2 = rnd(2, 3, seed=5)

    def build(x: oc.Tensor, y: oc.Tensor) -> oc.Tensor:
        # a differentiable companion term makes the loss differentiable; the comparison
        # contributes its value only
        return cmp(x, y) + x * y * oc.ndarray(W2)

    def np_fn(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return npf(x, y).astype(np.float64) + x * y * W2

    W = out_weights(build(P(a).make("a", a), P(b).make("b", b)))
    check_grads(build, [a, b], np_fn=np_fn, expected_grads=[W * W2 * b, W * W2 * a], fd=False)


@pytest.mark.parametrize("name", ["lt", "le"])
def test_ordering_comparison_finite_differences(name: str) -> None:
    cmp = getattr(oc, name)
    a, b = rnd(2, 2), rnd(2, 2, seed=1)  # no ties
    check_grads(lambda x, y: cmp(x, y) * 3.0 + x * y, [a, b],
                np_fn=lambda x, y: getattr(np, "less" if name == "lt" else "less_equal")(x, y)
                * 3.0 + x * y)


def test_comparison_operators() -> None:
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([2.0, 2.0, 2.0])
    x, y = oc.ndarray(a), oc.ndarray(b)
    np.testing.assert_array_equal(oc.eval(x < y), (a < b).astype(np.float32))
    np.testing.assert_array_equal(oc.eval(x <= y), (a <= b).astype(np.float32))
    np.testing.assert_array_equal(oc.eval(x > y), (a > b).astype(np.float32))
    np.testing.assert_array_equal(oc.eval(x >= y), (a >= b).astype(np.float32))


def test_stop_gradient_blocks() -> None:
    a, b = rnd(2, 3), rnd(2, 3, seed=1)

    def build(x: oc.Tensor, y: oc.Tensor) -> oc.Tensor:
        return oc.stop_gradient(x) * y

    W = out_weights(build(P(a).make("a", a), P(b).make("b", b)))
    check_grads(build, [a, b], np_fn=lambda x, y: x * y,
                expected_grads=[np.zeros_like(a), W * a], fd=False)


def test_stop_gradient_one_path_of_two() -> None:
    a = rnd(2, 3)

    def build(x: oc.Tensor) -> oc.Tensor:
        return oc.stop_gradient(x) * x  # d/dx = stop(x) = x (one path only)

    W = out_weights(build(P(a).make("a", a)))
    check_grads(build, [a], np_fn=lambda x: x * x, expected_grads=[W * a], fd=False)


def test_stop_gradient_of_an_infinite_derivative_gives_no_nan() -> None:
    # d/dx [stop(sqrt(x)) * x] = sqrt(x): 0 at x = 0. sqrt's own derivative there is
    # infinite; no gradient reaches sqrt (only stop_gradient reads it), so none of it may
    # leak into x's as 0 * inf = NaN
    x = oc.param("x", output_dims=[3])
    loss = oc.einsum("o=>", oc.stop_gradient(oc.sqrt(x)) * x)
    ctx = oc.Context()
    step = ctx.compile([oc.grad_update(loss)])
    ctx.set(x, np.array([0.0, 1.0, 4.0], np.float32))
    step()
    np.testing.assert_array_equal(ctx.get(x.grad), [0.0, 1.0, 2.0])


def test_no_gradient_code_behind_stop_gradient() -> None:
    # a stable softmax's row max is behind stop_gradient: its gradient (the ties it would
    # share a gradient among) is never computed
    x = oc.param("x", output_dims=[2, 5])
    loss = oc.einsum("a,o=>", oc.nn.softmax(x) * oc.ndarray(rnd(2, 5)))
    c = oc.render([oc.grad_update(loss)], backend="c")
    nests = c[c.index("int routine_f0("):]  # (after the helpers' definitions)
    assert "ocannl_max_f(" in nests  # the max
    assert " == " not in nests  # no tie count of it


# ---- transpose -----------------------------------------------------------------------------

def test_transpose() -> None:
    check_grads(lambda w: oc.transpose(w), [P(rnd(2, 3), input_axes=1)],
                np_fn=lambda w: w.T)


def test_transpose_then_compose() -> None:
    # transpose(w): out 3, in 2; composed with x (out 2): out 3
    check_grads(lambda w, x: oc.transpose(w) @ x, [P(rnd(2, 3), input_axes=1), rnd(2, seed=1)],
                np_fn=lambda w, x: w.T @ x)


# ---- einsum family -------------------------------------------------------------------------

def test_einsum_unary_row_sum() -> None:
    check_grads(lambda a: oc.einsum("ij=>i", a), [rnd(2, 3)], np_fn=lambda a: a.sum(1))


def test_einsum_unary_permute() -> None:
    check_grads(lambda a: oc.einsum("ij=>ji", a), [rnd(2, 3)], np_fn=lambda a: a.T)


def test_einsum_unary_full_sum() -> None:
    check_grads(lambda a: oc.exp(oc.einsum("ij=>", a)), [rnd(2, 3) * 0.3],
                np_fn=lambda a: np.exp(a.sum()))


def test_einsum_binary_matmul() -> None:
    check_grads(lambda a, b: oc.einsum("ij;jk=>ik", a, b), [rnd(2, 3), rnd(3, 2, seed=1)],
                np_fn=lambda a, b: a @ b)


def test_einsum_binary_outer() -> None:
    check_grads(lambda a, b: oc.einsum("i;j=>ij", a, b), [rnd(2), rnd(3, seed=1)],
                np_fn=lambda a, b: np.outer(a, b))


def test_einsum_ternary_dot() -> None:
    check_grads(lambda a, b, c: oc.einsum("i;i;i=>", a, b, c),
                [rnd(3), rnd(3, seed=1), rnd(3, seed=2)],
                np_fn=lambda a, b, c: np.asarray((a * b * c).sum()))


def test_einsum_ternary_chain() -> None:
    check_grads(lambda a, b, c: oc.einsum("ij;jk;kl=>il", a, b, c),
                [rnd(2, 2), rnd(2, 3, seed=1), rnd(3, 2, seed=2)],
                np_fn=lambda a, b, c: a @ b @ c)


def test_einsum_same_tensor_twice() -> None:
    check_grads(lambda a: oc.einsum("ij;ij=>i", a, a), [rnd(2, 3)],
                np_fn=lambda a: (a * a).sum(1))


def test_einsum_max_unary() -> None:
    a = np.array([[0.3, 1.7, -0.2], [2.5, 0.1, 1.0]])  # distinct values, margins >> eps

    def build(x: oc.Tensor) -> oc.Tensor:
        return oc.einsum_max("ij=>i", x)

    W = out_weights(build(P(a).make("a", a)))
    expected = np.zeros_like(a)
    expected[np.arange(2), a.argmax(1)] = W
    check_grads(build, [a], np_fn=lambda x: x.max(1), expected_grads=[expected])


def test_einsum_max_unary_column() -> None:
    a = np.array([[0.3, 1.7, -0.2], [2.5, 0.1, 1.0]])
    check_grads(lambda x: oc.einsum_max("ij=>j", x), [a], np_fn=lambda x: x.max(0))


def test_einsum_max_binary_tropical() -> None:
    a = np.array([[0.0, 1.0, 2.5], [3.0, -1.0, 0.2]])
    b = np.array([[0.7, -0.4], [0.1, 2.2], [-1.3, 0.55]])

    def np_fn(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return (x[:, :, None] + y[None, :, :]).max(1)

    s = a[:, :, None] + b[None, :, :]
    # distinct sums along k: the argmax is unambiguous
    srt = np.sort(s, axis=1)
    assert (srt[:, -1, :] - srt[:, -2, :]).min() > 0.05
    check_grads(lambda x, y: oc.einsum_max("ik;kj=>ij", x, y), [a, b], np_fn=np_fn)


def test_einsum_max_binary_tropical_expected_grads() -> None:
    a = np.array([[0.0, 1.0, 2.5], [3.0, -1.0, 0.2]])
    b = np.array([[0.7, -0.4], [0.1, 2.2], [-1.3, 0.55]])

    def build(x: oc.Tensor, y: oc.Tensor) -> oc.Tensor:
        return oc.einsum_max("ik;kj=>ij", x, y)

    W = out_weights(build(P(a).make("a", a), P(b).make("b", b)))
    s = a[:, :, None] + b[None, :, :]
    k = s.argmax(1)
    ga, gb = np.zeros_like(a), np.zeros_like(b)
    for i in range(2):
        for j in range(2):
            ga[i, k[i, j]] += W[i, j]
            gb[k[i, j], j] += W[i, j]
    check_grads(build, [a, b], expected_grads=[ga, gb], fd=False)


# ---- batch_slice -----------------------------------------------------------------------------

@pytest.mark.parametrize("row", [0, 2])
def test_batch_slice_gradient_finite_differences(row: int) -> None:
    data0 = rnd(3, 2)
    W = rnd(2, seed=9)

    def build(arr: np.ndarray) -> tuple[oc.Tensor, oc.Tensor]:
        d = P(arr, batch_axes=1).make("d", arr)
        idx = oc.static_index("batch")
        loss = oc.einsum("i;i=>", oc.exp(d.batch_slice(idx)), oc.ndarray(W))
        return loss, d

    def run(arr: np.ndarray, with_grad: bool) -> tuple[float, np.ndarray | None]:
        loss, d = build(arr)
        ctx = oc.Context(precision="float64")
        code = oc.grad_update(loss) if with_grad else loss.forward
        ctx.compile(code)(batch=row)
        return _scalar(ctx.get(loss)), (ctx.get(d.grad) if with_grad else None)

    value, grad = run(data0, True)
    assert value == pytest.approx(float((np.exp(data0[row]) * W).sum()), rel=1e-12)
    expected = np.zeros_like(data0)
    expected[row] = np.exp(data0[row]) * W
    np.testing.assert_allclose(grad, expected, rtol=1e-12, atol=1e-14)
    num = np.zeros_like(data0)
    for idx in np.ndindex(data0.shape):
        p, m = data0.copy(), data0.copy()
        p[idx] += EPS
        m[idx] -= EPS
        num[idx] = (run(p, False)[0] - run(m, False)[0]) / (2 * EPS)
    np.testing.assert_allclose(grad, num, rtol=RTOL, atol=1e-7)


# ---- further cases ---------------------------------------------------------------------------

def test_div_broadcast() -> None:
    check_grads(lambda a, b: a / b, [rnd(2, 3), rnd(3, seed=1, low=0.5, high=2.0)],
                np_fn=lambda a, b: a / b)


def test_sub_broadcast_batch() -> None:
    # a batch-and-output param minus an output-only param
    check_grads(lambda a, b: a - b * b, [P(rnd(2, 3), batch_axes=1), rnd(3, seed=1)],
                np_fn=lambda a, b: a - b * b)


def test_einsum_max_unary_all_negative() -> None:
    # the max of negative numbers is negative: the reduction must not start from 0
    a = np.array([[-3.0, -1.5, -2.0], [-0.5, -4.0, -0.7]])
    check_grads(lambda x: oc.einsum_max("ij=>i", x), [a], np_fn=lambda x: x.max(1))


def test_einsum_max_binary_all_negative() -> None:
    a = np.array([[-3.0, -1.5, -2.0], [-0.5, -4.0, -0.7]])
    b = np.array([[-1.0, -2.0], [-3.0, -0.5], [-2.2, -2.6]])
    check_grads(lambda x, y: oc.einsum_max("ik;kj=>ij", x, y), [a, b],
                np_fn=lambda x, y: (x[:, :, None] + y[None, :, :]).max(1))


def test_einsum_diagonal() -> None:
    check_grads(lambda a: oc.einsum("ii=>i", a), [rnd(3, 3)], np_fn=np.diagonal)


def test_einsum_trace_times_matrix() -> None:
    check_grads(lambda a, b: oc.einsum("ii;jk=>jk", a, b), [rnd(2, 2), rnd(2, 3, seed=1)],
                np_fn=lambda a, b: np.trace(a) * b)


def test_grad_with_respect_to_intermediate() -> None:
    a = np.array([1.0, -2.0, 0.5])
    p = P(a).make("p", a)
    x = oc.exp(p)
    loss = oc.einsum("i=>", x * x)
    _, (gx, gp) = oc.value_and_grad(loss, [x, p], precision="float64")
    np.testing.assert_allclose(gx, 2 * np.exp(a), rtol=1e-13)
    np.testing.assert_allclose(gp, 2 * np.exp(2 * a), rtol=1e-13)


def test_float32_gradients_close_to_float64() -> None:
    a = rnd(2, 3)
    for precision, tol in (("float32", 1e-5), ("float64", 1e-13)):
        p = P(a).make("p", a)
        loss = oc.einsum("ij=>", oc.tanh(p) * oc.exp(p))
        value, (g,) = oc.value_and_grad(loss, [p], precision=precision)
        assert np.asarray(g).dtype == (np.float32 if precision == "float32" else np.float64)
        ref_g = (1 - np.tanh(a) ** 2) * np.exp(a) + np.tanh(a) * np.exp(a)
        np.testing.assert_allclose(g, ref_g, rtol=tol, atol=tol)
        assert _scalar(value) == pytest.approx(float((np.tanh(a) * np.exp(a)).sum()), rel=tol)


@pytest.mark.parametrize("name", ["lt", "le", "eq", "ne"])
def test_comparison_result_not_differentiable(name: str) -> None:
    a = P(np.array([1.0, 2.0])).make("a", np.array([1.0, 2.0]))
    b = P(np.array([2.0, 2.0])).make("b", np.array([2.0, 2.0]))
    loss = oc.einsum("i=>", getattr(oc, name)(a, b))
    with pytest.raises(oc.OcannlError):
        oc.value_and_grad(loss, [a, b], precision="float64")
    # its value is still computed
    np.testing.assert_array_equal(
        oc.eval(loss, precision="float64").reshape(()),
        float(getattr(np, {"lt": "less", "le": "less_equal", "eq": "equal",
                           "ne": "not_equal"}[name])([1.0, 2.0], [2.0, 2.0]).sum()))


def test_a_loss_of_several_cells_backpropagates_their_sum() -> None:
    """Documented (docs/training.md), as OCANNL's backprop: each cell's gradient is seeded
    with 1, so value_and_grad of a vector is the gradient of its sum."""
    s = oc.ndarray([1.0, 2.0], grad_spec="require", label="s_sum")
    value, (g,) = oc.value_and_grad(s * s, [s], ctx=oc.Context(precision="float64"))
    np.testing.assert_array_equal(value, [1.0, 4.0])
    np.testing.assert_array_equal(g, [2.0, 4.0])
