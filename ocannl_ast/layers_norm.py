"""`oc.nn.batch_norm`: normalization per feature over the batch, with running statistics
(held params, updated by the training graph's forward code, read by the eval graph), as
torch.nn.BatchNorm1d/2d. Written in the @op / @cd dialect.

Input: hyperparameters, then tensors `batch|..., features`. Output: layers, tensors.
"""

# Written in the @op / @cd dialect: names declared inline ({bn_gain}) exist after rewriting.
# ruff: noqa: F841

from __future__ import annotations

import math
from typing import Any

from .errors import ArgumentError, ShapeError
from .infer.terms import dim_size
from .layer_mode import is_training
from .rewrite import make_decorator
from .tensor import validate
from .tensor.leaves import param
from .tensor.node import Tensor
from .tensor.ops import einsum, recip, sqrt, stop_gradient

op = make_decorator("op", "ocannl_ast.tensor.dsl")
cd = make_decorator("cd", "ocannl_ast.tensor.dsl")

#: a per-feature statistic: sum over the batch and every output axis but the last
_PER_FEATURE = "..b..|..o..,f => f"
#: scale the last output axis by a per-feature vector (with ones shaped like x first: the
#: vector broadcast over x)
_SCALE = "..b..|..o..,f; f => ..b..|..o..,f"


@op
def batch_norm(*, momentum=0.1, eps=1e-5):
    """Batch normalization over the last output axis (the features, torch's channels):
    `layer(x, *, train=None)` normalizes each feature by its mean and biased variance over
    the batch and every other output axis, then applies a learned gain (init 1) and bias
    (init 0). The running statistics `bn_running_mean` (init 0) and `bn_running_var`
    (init 1; the unbiased batch variance, as torch) are held, non-trainable params: the
    training graph's forward code updates them (`r = (1 - momentum) r + momentum batch`),
    the eval graph (`train=False`, or built inside `oc.nn.eval_mode()`) normalizes with
    them. Both are saved by `ctx.save`; read them as `layer.running_mean` /
    `layer.running_var` (e.g. `ctx.get(layer.running_var)`).

    Example: ``bn = oc.nn.batch_norm(); train_out = bn(x)``, then
    ``with oc.nn.eval_mode(): test_out = bn(x_test)``."""
    _check_fraction("batch_norm", "momentum", momentum)
    validate.check_nonnegative("batch_norm", "eps", eps)
    if not math.isfinite(eps):
        validate.fail(ArgumentError, f"batch_norm: eps must be finite, got {eps!r}")
    running_mean = param("bn_running_mean", init=0.0, grad_spec="prohibit")
    running_var = param("bn_running_var", init=1.0, grad_spec="prohibit")

    def layer(x, *, train=None):
        validate.check_tensor("batch_norm", "x", x)
        ones = 0.0 * stop_gradient(x) + 1.0
        training = is_training("batch_norm", train)
        if training:
            _check_count(x)
            count = einsum(_PER_FEATURE, ones)
            mean = einsum(_PER_FEATURE, x) / count
            centered = x - einsum(_SCALE, ones, mean)
            var = einsum(_PER_FEATURE, centered * centered) / count
        else:
            centered = x - einsum(_SCALE, ones, running_mean)
            var = running_var
        normalized = einsum(_SCALE, centered, recip(sqrt(var + eps)))
        out = einsum(_SCALE, normalized, {bn_gain := 1.0}) + einsum("f=>f", {bn_bias := 0.0})
        if training:  # the forward code also updates the running statistics
            unbiased = stop_gradient(var) * (count / (count - 1.0))
            _attach(out, _track(running_mean, stop_gradient(mean), momentum)
                    + _track(running_var, unbiased, momentum))
        return out

    layer.running_mean = running_mean
    layer.running_var = running_var
    return layer


@cd
def _track(running, batch_stat, momentum):
    """One running statistic's update: `r = (1 - momentum) * r + momentum * batch`."""
    running[...] = (1.0 - momentum) * running + momentum * batch_stat


def _attach(t: Tensor, code: Any) -> None:
    """Run `code` as part of `t`'s own forward code (so any routine computing `t`, the
    training step or an eval, also runs it, as torch's forward updates running stats)."""
    t._own = t._own + code


def _check_count(x: Tensor) -> None:
    """A located error when the per-feature count is known now and is 1 (the unbiased
    variance would divide by zero; torch refuses it too)."""
    b, o, _ = x.shape.rows_now()
    if b.var is not None or o.var is not None or not o.dims:
        return
    sizes = [dim_size(d) for d in (*b.dims, *o.dims[:-1])]
    if all(n == 1 for n in sizes):
        validate.fail(ShapeError, f"batch_norm: x ({x.shape}) has one value per feature; "
                                  "training needs more than one (a batch of 2 or more)")


def _check_fraction(fn: str, name: str, v: Any) -> None:
    validate.check_arg_number(fn, name, v)
    if not 0.0 <= v <= 1.0:
        validate.fail(ArgumentError, f"{fn}: {name} must be in [0, 1], got {v!r}")

