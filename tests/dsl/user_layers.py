"""An ordinary user module written in the @op/@cd dialect (imported by test_user_module)."""
# ruff: noqa: F821, F841
# mypy: ignore-errors

from __future__ import annotations

import ocannl_ast as oc
from ocannl_ast import relu


@oc.op
def mlp_layer(hid_dim):
    return lambda x: relu({w} @ x + {b, o := [hid_dim]})


@oc.cd
def sgd_one(p, learning_rate, momentum=0.0, weight_decay=0.0, nesterov=False):
    {sgd_delta}[...] = p.grad + weight_decay * p
    if momentum > 0.0:
        {sgd_momentum}[...] = momentum * sgd_momentum + sgd_delta
        if nesterov:
            sgd_delta += momentum * sgd_momentum
        else:
            sgd_delta[...] = sgd_momentum
    p -= learning_rate * sgd_delta


@oc.op
def row_sums(x):
    y[i] = sum[j](x[i, j])
    return y


@oc.op
def column_sums(x):
    y[j] = sum[i](x[i, j])
    return y


@oc.op
def row_max(x):
    y[i] = max[j](x[i, j])
    return y


@oc.cd
def composed(v, a, b):
    """`sum(a @ b)`: called with the same tensor twice it is still two operands."""
    v[...] = sum(a @ b)


@oc.cd
def transposed_product(v, a, b):
    accum(v, "=:", a * b, logic="ij;ji=>ij")


@oc.op
def shifted_window(x, w):
    """A window read two cells ahead, the shift written between the output and the
    kernel index (the spec it makes put the offset last, which the grammar refused)."""
    y[o] = sum[k](x[o + 2 + k] * w[k])
    return y


@oc.op
def matmul(a, b):
    c[i, k] = sum[j](a[i, j] * b[j, k])
    return c


@oc.cd
def interleave(t, a, b):
    t[...] = sum(a, logic="..., i => ..., 2*i")
    t += sum(b, logic="..., i => ..., 2*i + 1")


@oc.cd
def evens(out, t):
    out[i] = t[2 * i]


@oc.cd
def cube_op(v, v1, projections):
    v[...] = v1 * v1 * v1


@oc.cd
def cube_grad(g, g1, v1, projections):
    g1 += 3.0 * v1 * v1 * g


cube = oc.unary_op(cube_op, cube_grad, name="cube")


@oc.cd
def scaled_sum_op(v, v1, v2, projections):
    v[...] = sum(v1 * v2)


@oc.cd
def scaled_sum_grad(g, g1, g2, v1, v2, projections):
    g1 += g * v2
    g2 += v1 * g


weighted_rows = oc.binary_op(scaled_sum_op, scaled_sum_grad, logic="ij;j=>i", name="rows")
