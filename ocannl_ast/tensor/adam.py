"""Adam with decoupled weight decay (AdamW), written as assignment code like `sgd_update`.

Optimizer state lives in the context as persistent, non-differentiable inline nodes (zeros
until written), one set per parameter: the moments `adam_m`, `adam_v`, and the bias
corrections `adam_c1 = 1 - beta1**t`, `adam_c2 = 1 - beta2**t`. The step count t is held
implicitly by those two nodes: starting from 0, `c <- beta * c + (1 - beta)` gives exactly
`1 - beta**t` after t steps, so no power and no step argument are needed, and the state is
saved and restored with every other context-held tensor (`ctx.save`), each named under
its parameter: `"mlp.linear.w/adam_m"` (`ocannl_ast.naming.state_code`).

Input: a scalar loss tensor. Output: Code for `Context.compile`, run after `grad_update`.
"""

# Written in the @cd dialect: names declared inline ({adam_m}) exist after rewriting.
# ruff: noqa: F821, F841

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError, at, user_span
from ..lowering.gc_pause import gc_paused
from ..naming import state_code
from ..rewrite import make_decorator
from . import validate
from .clipping import check_max_grad_norm, clip_grad_norm, trainable
from .node import Code, Tensor, concat
from .schedules import advance, counters_of, rate_code

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")


@cd
def adam_one(p, learning_rate, beta1, beta2, eps, weight_decay):
    """One parameter's AdamW step (decoupled weight decay, bias-corrected moments)."""
    # stored in the compute precision: in 16-bit cells the increments stall (bfloat16's
    # adam_c2 at 0.25, where 1 - beta2**t is near 1)
    {adam_c1, precision := "compute"}[...] = beta1 * adam_c1 + (1.0 - beta1)
    {adam_c2, precision := "compute"}[...] = beta2 * adam_c2 + (1.0 - beta2)
    # torch.optim.AdamW's arithmetic: per cell one square root and two divisions; the
    # corrections' sqrt(c2) and lr / c1 once, before the cells' updates (which then form
    # one nest)
    {adam_rc2}[...] = sqrt(adam_c2)
    {adam_lr}[...] = learning_rate / adam_c1
    {adam_m}[...] = beta1 * adam_m + (1.0 - beta1) * p.grad
    {adam_v}[...] = beta2 * adam_v + (1.0 - beta2) * (p.grad * p.grad)
    if weight_decay != 0.0:
        p -= (learning_rate * weight_decay) * p
    {adam_den}[...] = sqrt(adam_v) / adam_rc2
    adam_den += eps
    p -= adam_lr * (adam_m / adam_den)


def adam_update(loss: Tensor, *, learning_rate: Any = 1e-3,
                betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                weight_decay: float = 0.0, max_grad_norm: float | None = None) -> Code:
    """AdamW updates of every parameter of the loss (run after `grad_update(loss)`):
    ``p -= lr * wd * p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
    p -= (lr / (1 - b1**t)) * (m / (sqrt(v) / sqrt(1 - b2**t) + eps))``
    (torch.optim.AdamW's order of operations).

    `learning_rate` may be a tensor, e.g. a schedule (`oc.lr_cosine`): it is computed in
    the routine before the updates; every step counter it or the loss reads
    (`oc.step_counter`) is incremented after them. With `max_grad_norm`, the gradients are
    first clipped by their global L2 norm, as torch.nn.utils.clip_grad_norm_.

    Example: ``ctx.compile([oc.grad_update(loss), oc.adam_update(loss, learning_rate=0.01)])``.
    """
    beta1, beta2 = _adam_args(loss, learning_rate, betas, eps, weight_decay)
    check_max_grad_norm("adam_update", max_grad_norm)
    params = trainable(loss)
    clip = Code() if max_grad_norm is None else clip_grad_norm(params, max_grad_norm)
    # thousands of small objects that all survive: collect once after; every assignment
    # is located at the caller's line (as each would find it): looked up once, not per one
    with gc_paused(), at(user_span()):
        updates = concat(state_code(p, adam_one, p, learning_rate, beta1, beta2, eps, weight_decay)
                         for p in params)
    return (rate_code(learning_rate) + clip + updates
            + advance(counters_of(loss, learning_rate)))


def _adam_args(loss: Any, learning_rate: Any, betas: Any, eps: Any,
               weight_decay: Any) -> tuple[float, float]:
    """Validate `oc.adam_update`'s arguments; the two betas."""
    validate.check_tensor("adam_update", "loss", loss)
    if not isinstance(learning_rate, Tensor):
        validate.check_nonnegative("adam_update", "learning_rate", learning_rate)
    if not isinstance(betas, tuple | list) or len(betas) != 2:
        validate.fail(ArgumentError, "adam_update: betas must be a pair (beta1, beta2), got "
                      f"{validate.describe(betas)}")
    for i, b in enumerate(betas):
        validate.check_arg_number("adam_update", f"betas[{i}]", b)
        if not 0.0 <= b < 1.0:
            validate.fail(ArgumentError, f"adam_update: betas[{i}] must be in [0, 1), got {b}")
    validate.check_nonnegative("adam_update", "eps", eps)
    validate.check_nonnegative("adam_update", "weight_decay", weight_decay)
    return float(betas[0]), float(betas[1])
