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
from .naming import scope as name_scope
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
    with name_scope("mlp"):  # params: mlp.linear.w, mlp.linear_1.w, ...
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


def _pair(fn: str, name: str, v: Any) -> tuple[int, int]:
    """An int or a pair of ints (height, width), each positive."""
    pair = tuple(v) if isinstance(v, list | tuple) else (v, v)
    if len(pair) != 2:
        validate.fail(ArgumentError, f"{fn}: {name} must be an int or a pair of ints, got "
                                     f"{validate.describe(v)}")
    for d in pair:
        _check_dim(fn, name, d)
    return pair[0], pair[1]


def _window_spec(sh: int, sw: int, mode: str, kernel: str, out: str) -> str:
    """`..b..|sh*oh<+kh, sw*ow<+kw, c[; kernel] => ..b..|oh, ow, out` (`=+` when padded)."""
    m = "=" if mode == "same" else "<"
    return f"..b..|{sh}*oh{m}+kh, {sw}*ow{m}+kw, c{kernel} => ..b..|oh, ow, {out}"


def conv2d(out_channels: int, kernel_size: Any, *, stride: Any = 1,
           padding: str = "same") -> Layer:
    """2-D convolution of `x` (batch|height, width, channels): kernel `kh, kw, in_ch ->
    out_ch` (in_ch inferred from `x`) plus a bias over out_ch. PyTorch output sizes:
    "same" zero-pads, output = input / stride (the input must divide); "valid" has
    output = (input - kernel) / stride + 1 (the windows must tile the input exactly)."""
    _check_dim("conv2d", "out_channels", out_channels)
    kh, kw = _pair("conv2d", "kernel_size", kernel_size)
    sh, sw = _pair("conv2d", "stride", stride)
    if padding not in ("same", "valid"):
        validate.fail(ArgumentError, 'conv2d: padding must be "same" or "valid", got '
                                     f"{validate.describe(padding)}")
    spec = _window_spec(sh, sw, padding, "; kh, kw, c -> oc", "oc")
    return _conv_layer(spec, out_channels, kh, kw)


@op
def _conv_layer(spec, out_channels, kh, kw):
    # The window operand (ones over kh, kw) pins the kernel's spatial sizes.
    return lambda x: einsum(spec, x, {kernel}, window={"kh": kh, "kw": kw}) + \
        {bias, o := [out_channels]}


def max_pool2d(window: Any, *, stride: Any = None) -> Layer:
    """Max over `window` x `window` patches of `x` (batch|height, width, channels), no
    padding; `stride` defaults to the window. The windows must tile the input exactly."""
    spec, kh, kw = _pool_spec("max_pool2d", window, stride)
    return lambda x: einsum_max(spec, x, window={"kh": kh, "kw": kw})


def avg_pool2d(window: Any, *, stride: Any = None) -> Layer:
    """Mean over `window` x `window` patches of `x` (batch|height, width, channels), no
    padding; `stride` defaults to the window. The windows must tile the input exactly."""
    spec, kh, kw = _pool_spec("avg_pool2d", window, stride)
    return lambda x: einsum(spec, x, window={"kh": kh, "kw": kw}) / float(kh * kw)


def _pool_spec(fn: str, window: Any, stride: Any) -> tuple[str, int, int]:
    kh, kw = _pair(fn, "window", window)
    sh, sw = (kh, kw) if stride is None else _pair(fn, "stride", stride)
    return _window_spec(sh, sw, "valid", "", "c"), kh, kw
