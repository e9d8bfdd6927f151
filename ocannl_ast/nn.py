"""`oc.nn`: first layers and losses, written in the `@op` dialect (inline params `{w}`).

Conventions: `x` has batch axes and its features in the output row; "the last output axis"
is the feature (class) axis. Layers are factories: each call mints fresh parameters, every
use of the returned layer shares them. Losses return a one-cell tensor.

Input: tensors. Output: tensors (layers: callables from tensor to tensor).
"""

# Written in the @op dialect: names declared inline ({w}) exist after rewriting.
# ruff: noqa: F821, F841
# mypy: ignore-errors

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .errors import ArgumentError
from .rewrite import make_decorator
from .tensor import validate
from .tensor.node import Tensor
from .tensor.ops import einsum, einsum_max, exp, log, recip, relu, sqrt, stop_gradient
from .tensor.ops.fetch import embed_dim

op = make_decorator("op", "ocannl_ast.tensor.dsl")

Layer = Callable[[Tensor], Tensor]

# Reduce the last output axis, keeping it as a size-1 axis (keepdims) so that the result
# broadcasts back along the axis it came from (docs/einsum.md, the reduction pitfall).
_LAST_KEEP = "..b..|..o..,i=>..b..|..o..,_"
# Scale the last output axis by a vector (gain / bias of layer_norm).
_LAST_SCALE = "..b..|..o..,i;i=>..b..|..o..,i"
# Sum every cell into one.
_ALL = "..b..|..i..->..o..=>0"


@op
def linear(out_dim):
    """`layer(x) = w @ x + b`: `out_dim` outputs; w's input dims are inferred from `x`."""
    _check_dim("linear", "out_dim", out_dim)
    return lambda x: {w} @ x + {b, o := [out_dim]}


def mlp(dims: Sequence[int], activation: Callable[[Tensor], Tensor] = relu) -> Layer:
    """Linear layers of output sizes `dims`, `activation` between them (not after the
    last). Example: ``model = oc.nn.mlp([16, 16, 1])``."""
    if not isinstance(dims, list | tuple) or not dims:
        validate.fail(ArgumentError, "mlp: dims must be a non-empty list of positive ints, "
                                     f"got {validate.describe(dims)}")
    for i, d in enumerate(dims):
        _check_dim("mlp", f"dims[{i}]", d)
    validate.check_callable("mlp", "activation", activation)
    layers = [linear(d) for d in dims]

    def model(x: Tensor) -> Tensor:
        for i, layer in enumerate(layers):
            x = layer(x) if i == 0 else layer(activation(x))
        return x

    return model


@op
def softmax(x):
    """Softmax over the last output axis, stable: the row max is subtracted first."""
    e = exp(x - stop_gradient(einsum_max(_LAST_KEEP, x)))
    return e * recip(einsum(_LAST_KEEP, e))


@op
def log_softmax(x):
    """Log-softmax over the last output axis: `z - log(sum(exp(z)))`, `z = x - max(x)`."""
    z = x - stop_gradient(einsum_max(_LAST_KEEP, x))
    return z - log(einsum(_LAST_KEEP, exp(z)))


@op
def cross_entropy(logits, targets):
    """`-sum(targets * log_softmax(logits))` over the last output axis, averaged over the
    batch (and any other axes): a one-cell tensor. `targets`: one-hot, the logits' shape."""
    per_example = einsum("..b..|..o..,i;..b..|..o..,i=>..b..|..o..", targets,
                         log_softmax(logits))
    return -_mean(per_example)


@op
def mse(pred, target):
    """Mean squared error over every cell: a one-cell tensor."""
    d = pred - target
    return _mean(d * d)


@op
def layer_norm(eps=1e-5):
    """Normalize over the last output axis (mean 0, variance 1, biased variance as in
    PyTorch), then scale by a learned gain (init 1) and shift by a learned bias (init 0),
    both vectors over that axis."""
    validate.check_number("layer_norm", "eps", eps)
    if eps < 0:
        validate.fail(ArgumentError, f"layer_norm: eps must be >= 0, got {eps}")

    def layer(x):
        n = embed_dim(x)
        xc = x - einsum(_LAST_KEEP, x) * recip(n)
        var = einsum(_LAST_KEEP, xc * xc) * recip(n)
        normalized = xc * recip(sqrt(var + eps))
        return einsum(_LAST_SCALE, normalized, {ln_gain := 1.0}) + einsum("i=>i", {ln_bias := 0.0})

    return layer


def _mean(t: Tensor) -> Tensor:
    """The mean of every cell of `t` (the count is the sum of a ones tensor shaped like
    `t`, so it follows `t`'s inferred shape)."""
    ones = 0.0 * stop_gradient(t) + 1.0
    return einsum(_ALL, t) * recip(einsum(_ALL, ones))


def _check_dim(fn: str, name: str, d: Any) -> None:
    if not validate.is_int(d) or d <= 0:
        validate.fail(ArgumentError, f"{fn}: {name} must be a positive int, got "
                                     f"{validate.describe(d)}")
