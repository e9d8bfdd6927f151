"""Training code: gradient update (forward + zero grads + backprop) and OCANNL's SGD with
weight decay, momentum and Nesterov momentum, written as assignment code.

Input: a scalar loss tensor. Output: Code for `Context.compile`.
"""

# Written in the @cd dialect: names declared inline ({sgd_delta}) exist after rewriting.
# ruff: noqa: F821

from __future__ import annotations

from typing import Any

from ..errors import at, user_span
from ..lowering.gc_pause import gc_paused
from ..naming import state_code
from ..rewrite import make_decorator
from . import validate
from .clipping import check_max_grad_norm, clip_grad_norm, trainable
from .node import Code, Tensor, concat
from .schedules import advance, counters_of, rate_code

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")


def grad_update(loss: Tensor) -> Code:
    """Forward code, then backprop: after it runs every param's grad is d loss / d param."""
    validate.check_tensor("grad_update", "loss", loss)
    return loss.forward + loss.backprop


@cd
def sgd_direct(p, learning_rate, momentum=0.0):
    """`sgd_one` without weight decay or Nesterov momentum: OCANNL's `sgd_delta` would only
    copy the gradient (or the momentum), so the step reads that directly -- the same bits,
    two assignments fewer per parameter to infer, lower and compile."""
    if momentum > 0.0:
        # two statements: `momentum * sgd_momentum + p.grad` would make the product an
        # intermediate tensor (a nested sub-expression); the same bits either way
        {sgd_momentum}[...] = momentum * sgd_momentum
        sgd_momentum += p.grad
        p -= learning_rate * sgd_momentum
    else:
        p -= learning_rate * p.grad


@cd
def sgd_one(p, learning_rate, momentum=0.0, weight_decay=0.0, nesterov=False):
    """One parameter's SGD step (OCANNL `sgd_one`): weight decay, momentum, Nesterov."""
    {sgd_delta}[...] = p.grad
    if weight_decay != 0.0:
        sgd_delta += weight_decay * p
    if momentum > 0.0:
        {sgd_momentum}[...] = momentum * sgd_momentum + sgd_delta
        if nesterov:
            sgd_delta += momentum * sgd_momentum
        else:
            sgd_delta[...] = sgd_momentum
    p -= learning_rate * sgd_delta


def sgd_update(loss: Tensor, *, learning_rate: Any, momentum: float = 0.0,
               weight_decay: float = 0.0, nesterov: bool = False,
               max_grad_norm: float | None = None) -> Code:
    """SGD updates of every parameter of the loss (run after `grad_update(loss)`), then
    `+= 1` on every step counter the loss or `learning_rate` (e.g. `oc.lr_warmup`) reads.
    With `max_grad_norm`, the gradients are first clipped by their global L2 norm, as
    torch.nn.utils.clip_grad_norm_."""
    validate.sgd_args(loss, learning_rate, momentum, weight_decay, nesterov)
    check_max_grad_norm("sgd_update", max_grad_norm)
    params = trainable(loss)
    clip = Code() if max_grad_norm is None else clip_grad_norm(params, max_grad_norm)
    # thousands of small objects that all survive: collect once after; every assignment
    # is located at the caller's line (as each would find it): looked up once, not per one
    with gc_paused(), at(user_span()):
        if weight_decay == 0.0 and not (momentum > 0.0 and nesterov):
            updates = concat(state_code(p, sgd_direct, p, learning_rate, momentum=momentum)
                             for p in params)
        else:
            updates = concat(state_code(p, sgd_one, p, learning_rate, momentum=momentum,
                                        weight_decay=weight_decay, nesterov=nesterov)
                             for p in params)
    return (rate_code(learning_rate) + clip + updates
            + advance(counters_of(loss, learning_rate)))
