"""User-defined operations: `oc.unary_op` / `oc.binary_op` from plain Python op_asn / grad_asn
functions whose parameters are slot names, built with `accum` and `prim`.

Oracles: NumPy forward values and float64 central finite differences (every perturbed copy
of the graph built from fresh params; all of them evaluated by one `oc.eval`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pytest
from fd_util import central_differences

import ocannl_ast as oc
from ocannl_ast.tensor.builders import accum, prim

EPS = 1e-6


def _param(name: str, arr: np.ndarray, input_axes: int = 0) -> oc.Tensor:
    d = arr.shape
    no = len(d) - input_axes
    return oc.param(name, batch_dims=[], output_dims=list(d[:no]), input_dims=list(d[no:]),
                    init=arr.copy())


def _weighted_sum(out: oc.Tensor, W: np.ndarray) -> oc.Tensor:
    oc.infer_shapes(out)
    assert tuple(out.shape.batch) == ()
    o, i = tuple(out.shape.output), tuple(out.shape.input)
    assert W.shape == o + i, (W.shape, o, i)
    letters = iter("abcdefgh")
    spec = "".join(next(letters) for _ in i) + "->" + "".join(next(letters) for _ in o)
    return oc.einsum(f"{spec};{spec}=>", out, oc.ndarray(W, input_axes=len(i)))


def check(build_fn: Callable[..., oc.Tensor], arrays: Sequence[np.ndarray],
          np_fn: Callable[..., np.ndarray], *, input_axes: Sequence[int] | None = None,
          rtol: float = 1e-6) -> None:
    """Forward value against NumPy, gradients against central finite differences."""
    base = [np.asarray(a, dtype=np.float64) for a in arrays]
    ins = list(input_axes) if input_axes is not None else [0] * len(base)
    ref = np.asarray(np_fn(*base), dtype=np.float64)
    W = np.random.default_rng(7).standard_normal(ref.shape)

    def build(arrs: list[np.ndarray]) -> tuple[oc.Tensor, list[oc.Tensor], oc.Tensor]:
        ps = [_param(f"p{k}", a, n) for k, (a, n) in enumerate(zip(arrs, ins))]
        out = build_fn(*ps)
        return _weighted_sum(out, W), ps, out

    loss, ps, out = build(base)
    value, grads = oc.value_and_grad(loss, ps, precision="float64")
    np.testing.assert_allclose(oc.eval(out, precision="float64"), ref, rtol=1e-12, atol=1e-12)
    assert float(np.asarray(value).reshape(())) == pytest.approx(float((ref * W).sum()),
                                                                 rel=1e-12, abs=1e-12)
    base_loss, nums = central_differences(lambda arrs: build(arrs)[0], base, EPS)
    assert base_loss == pytest.approx(float(np.asarray(value).reshape(())), rel=1e-12, abs=1e-12)
    for k, (g, num) in enumerate(zip(grads, nums)):
        np.testing.assert_allclose(g, num, rtol=rtol, atol=1e-7,
                                   err_msg=f"gradient of operand {k} vs finite differences")


# ---- unary --------------------------------------------------------------------------------

def square_op(v, v1, projections):
    return accum(v, "=:", prim("mul", v1, v1), projections=projections)


def square_grad(g, g1, v1, projections):
    return accum(g1, "=+", prim("mul", prim("mul", 2.0, v1), g), projections=projections)


def test_unary_square() -> None:
    square = oc.unary_op(square_op, square_grad, name="square")
    a = np.array([[0.5, -1.5, 2.0], [0.3, -0.7, 1.1]])
    check(square, [a], np.square)


def test_unary_square_composes_with_builtin_ops() -> None:
    square = oc.unary_op(square_op, square_grad)
    a = np.array([0.4, -0.9, 1.3])
    check(lambda x: oc.sin(square(x * 2.0)) + square(x), [a],
          lambda x: np.sin((2 * x) ** 2) + x * x)


def test_unary_reads_result_value() -> None:
    # softplus-like: v = log(1 + exp(v1)); grad uses the result v: d/dx = 1 - exp(-v)
    def op_asn(v, v1, projections):
        return accum(v, "=:", prim("log", prim("add", 1.0, prim("exp", v1))),
                     projections=projections)

    def grad_asn(v, g, g1, projections):
        return accum(g1, "=+", prim("mul", g, prim("sub", 1.0, prim("exp", prim("neg", v)))),
                     projections=projections)

    softplus = oc.unary_op(op_asn, grad_asn)
    check(softplus, [np.array([-1.0, 0.2, 2.5, -0.3])], lambda x: np.log1p(np.exp(x)))


def test_unary_parameter_order_does_not_matter() -> None:
    # slots are passed by name: any order, any subset
    def op_asn(projections, v1, v):
        return accum(v, "=:", prim("mul", prim("mul", v1, v1), v1), projections=projections)

    def grad_asn(v1, projections, g1, g):
        return accum(g1, "=+", prim("mul", prim("mul", 3.0, prim("mul", v1, v1)), g),
                     projections=projections)

    cube = oc.unary_op(op_asn, grad_asn)
    check(cube, [np.array([0.5, -1.2, 0.8])], lambda x: x ** 3)


def test_unary_with_einsum_logic_sum_of_squares() -> None:
    def op_asn(v, v1, projections):
        return accum(v, "=:+", prim("mul", v1, v1), projections=projections)

    def grad_asn(g, g1, v1, projections):
        return accum(g1, "=+", prim("mul", prim("mul", 2.0, v1), g), projections=projections)

    row_sq = oc.unary_op(op_asn, grad_asn, logic="ij=>i")
    a = np.array([[0.5, -1.5, 2.0], [0.3, -0.7, 1.1]])
    check(row_sq, [a], lambda x: (x * x).sum(1))


def test_unary_with_transpose_logic() -> None:
    def op_asn(v, v1, projections):
        return accum(v, "=:", prim("exp", v1), projections=projections)

    def grad_asn(v, g, g1, projections):
        return accum(g1, "=+", prim("mul", g, v), projections=projections)

    exp_t = oc.unary_op(op_asn, grad_asn, logic="T")
    a = np.array([[0.5, -1.5, 0.2], [0.3, -0.7, 1.1]])  # out 2, in 3
    check(exp_t, [a], lambda x: np.exp(x).T, input_axes=[1])


def test_unary_without_grad_is_not_differentiable() -> None:
    square = oc.unary_op(square_op, None)
    a = np.array([0.5, -1.5, 2.0])
    p = _param("p", a)
    y = square(p)
    np.testing.assert_allclose(oc.eval(y, precision="float64"), a * a, rtol=1e-14)
    loss = oc.einsum("i=>", square(p) * p)  # only the second factor carries a gradient
    _, (g,) = oc.value_and_grad(loss, [p], precision="float64")
    np.testing.assert_allclose(g, a * a, rtol=1e-14)


# ---- binary --------------------------------------------------------------------------------

def test_binary_pointwise_product_exp() -> None:
    # f(a, b) = a * exp(b)
    def op_asn(v, v1, v2, projections):
        return accum(v, "=:", prim("mul", v1, prim("exp", v2)), projections=projections)

    def grad_asn(v, g, g1, g2, v2, projections):
        return (accum(g1, "=+", prim("mul", g, prim("exp", v2)), projections=projections)
                + accum(g2, "=+", prim("mul", g, v), projections=projections))

    f = oc.binary_op(op_asn, grad_asn, name="mul_exp")
    a = np.array([[0.5, -1.5, 2.0], [0.3, -0.7, 1.1]])
    b = np.array([[0.1, 0.4, -0.6], [-1.0, 0.25, 0.8]])
    check(f, [a, b], lambda x, y: x * np.exp(y))


def test_binary_pointwise_broadcast() -> None:
    # the second operand broadcasts over the first axis: its gradient sums over it
    def op_asn(v, v1, v2, projections):
        return accum(v, "=:", prim("sub", v1, prim("mul", v2, v2)), projections=projections)

    def grad_asn(g, g1, g2, v2, projections):
        return (accum(g1, "=+", g, projections=projections)
                + accum(g2, "=-", prim("mul", prim("mul", 2.0, v2), g), projections=projections))

    f = oc.binary_op(op_asn, grad_asn)
    a = np.array([[0.5, -1.5, 2.0], [0.3, -0.7, 1.1]])
    b = np.array([0.1, 0.4, -0.6])
    check(f, [a, b], lambda x, y: x - y * y)


def test_binary_compose_logic() -> None:
    def op_asn(v, v1, v2, projections):
        return accum(v, "=:+", prim("mul", v1, v2), projections=projections)

    def grad_asn(g, g1, g2, v1, v2, projections):
        return (accum(g1, "=+", prim("mul", g, v2), projections=projections)
                + accum(g2, "=+", prim("mul", v1, g), projections=projections))

    compose = oc.binary_op(op_asn, grad_asn, logic="@")
    w = np.array([[0.5, -1.5, 2.0], [0.3, -0.7, 1.1]])  # out 2, in 3
    x = np.array([0.2, -0.4, 0.9])
    check(compose, [w, x], lambda a, b: a @ b, input_axes=[1, 0])


def test_binary_einsum_logic_weighted_matmul() -> None:
    # out[i,k] = sum_j tanh(a[i,j]) * b[j,k]
    def op_asn(v, v1, v2, projections):
        return accum(v, "=:+", prim("mul", prim("tanh", v1), v2), projections=projections)

    def grad_asn(g, g1, g2, v1, v2, projections):
        th = prim("tanh", v1)
        return (accum(g1, "=+", prim("mul", prim("mul", g, v2),
                                     prim("sub", 1.0, prim("mul", th, th))),
                      projections=projections)
                + accum(g2, "=+", prim("mul", th, g), projections=projections))

    f = oc.binary_op(op_asn, grad_asn, logic="ij;jk=>ik")
    a = np.array([[0.5, -1.5, 2.0], [0.3, -0.7, 1.1]])
    b = np.array([[0.1, 0.4], [-0.6, 1.0], [0.25, -0.8]])
    check(f, [a, b], lambda x, y: np.tanh(x) @ y)


def test_binary_grad_only_for_first_operand() -> None:
    # grad_asn may leave an operand without a gradient; with a constant second operand the
    # g2 slot is None and is simply not used
    def op_asn(v, v1, v2, projections):
        return accum(v, "=:", prim("mul", v1, v2), projections=projections)

    def grad_asn(g, g1, g2, v2, projections):
        assert g2 is None  # the second operand (a constant) is not differentiable
        return accum(g1, "=+", prim("mul", g, v2), projections=projections)

    f = oc.binary_op(op_asn, grad_asn)
    c = np.array([1.5, -2.0, 0.5])
    check(lambda x: f(x, oc.ndarray(c)), [np.array([0.3, 0.6, -0.9])], lambda x: x * c)


def test_binary_same_tensor_both_slots() -> None:
    def op_asn(v, v1, v2, projections):
        return accum(v, "=:", prim("mul", v1, prim("sin", v2)), projections=projections)

    def grad_asn(g, g1, g2, v1, v2, projections):
        return (accum(g1, "=+", prim("mul", g, prim("sin", v2)), projections=projections)
                + accum(g2, "=+", prim("mul", prim("mul", g, v1), prim("cos", v2)),
                        projections=projections))

    f = oc.binary_op(op_asn, grad_asn)
    check(lambda x: f(x, x), [np.array([0.3, 1.6, -0.9])], lambda x: x * np.sin(x))


def test_unknown_parameter_name_raises() -> None:
    def op_asn(v, x1, projections):  # x1 is not a slot name
        return accum(v, "=:", x1, projections=projections)

    f = oc.unary_op(op_asn, None)
    with pytest.raises(oc.OcannlError):
        f(oc.ndarray([1.0, 2.0]))


def test_slot_out_of_range_raises() -> None:
    def op_asn(v, v1, v2, projections):  # a unary op has no second operand
        return accum(v, "=:", prim("add", v1, v2), projections=projections)

    f = oc.unary_op(op_asn, None)
    with pytest.raises(oc.OcannlError):
        f(oc.ndarray([1.0, 2.0]))


@oc.cd
def _double_op(v, v1, projections):
    v[...] = 2.0 * v1


@oc.cd
def _double_grad_sets(g, g1, projections):
    g1[...] = 2.0 * g  # wrong: overwrites what other readers of the operand added


@oc.cd
def _double_grad(g, g1, projections):
    g1 += 2.0 * g


def _sum_double_plus_triple(double: Callable[[oc.Tensor], oc.Tensor], first: bool) -> oc.Tensor:
    x = oc.param("x", init=np.array([1.0, 2.0]))
    body = double(x) + 3.0 * x if first else 3.0 * x + double(x)
    return oc.einsum("i=>", body)


@pytest.mark.parametrize("first", [True, False])
def test_gradient_function_must_accumulate_into_operand_grads(first: bool) -> None:
    # issue 23 item 4: `g1[...] = ...` gave [2, 2] or [5, 5] by operand order; now an error
    loss = _sum_double_plus_triple(oc.unary_op(_double_op, _double_grad_sets), first)
    with pytest.raises(oc.DslSyntaxError) as info:
        oc.grad_update(loss)
    msg = str(info.value)
    assert "g1 += ..." in msg and "test_custom_ops.py" in msg


@pytest.mark.parametrize("first", [True, False])
def test_accumulating_gradient_function_is_right_in_any_order(first: bool) -> None:
    loss = _sum_double_plus_triple(oc.unary_op(_double_op, _double_grad), first)
    ctx = oc.Context()
    ctx.compile(oc.grad_update(loss))()
    x = next(p for p in loss.params() if p.label == "x")
    np.testing.assert_allclose(ctx.get(x.grad), [5.0, 5.0])
