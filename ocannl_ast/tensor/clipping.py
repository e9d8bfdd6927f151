"""Gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_), the first part
of an optimizer update with `max_grad_norm=`: every trainable param's gradient is scaled by
`min(1, max_norm / (total_norm + 1e-6))`, `total_norm` over all of them. Written in @cd.

Input: the params and the norm bound. Output: Code (run before the optimizer's steps).
"""

# Written in the @cd dialect: names declared inline ({grad_norm_sq}) exist after rewriting.
# ruff: noqa: F821

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from ..errors import ArgumentError
from ..naming import scope
from ..rewrite import make_decorator
from . import validate
from .leaves import node
from .node import Code, Tensor, concat
from .ops import sqrt

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")

#: every cell of a gradient (g * g reads one node) into the one cell of the total
_ALL_CELLS = "..b..|..i..->..o.. => 0"
#: torch's guard against a zero norm in max_norm / (total_norm + eps)
NORM_EPS = 1e-6


@cd
def _zero(total):
    total[...] = 0.0


@cd
def _add_square_norm(total, p):
    """`total += sum(p.grad ** 2)` over every cell of the gradient."""
    accum(total, "=+", p.grad * p.grad, logic=_ALL_CELLS)


@cd
def _coefficient(coef, total, max_norm):
    """`coef = min(1, max_norm / (sqrt(total) + eps))` (torch's clamped clip_coef)."""
    coef[...] = min(1.0, max_norm / (sqrt(total) + NORM_EPS))


@cd
def _scale(p, coef):
    p.grad *= coef


def clip_grad_norm(params: Sequence[Tensor], max_norm: float) -> Code:
    """Code scaling the gradients of `params` so that their global L2 norm is at most
    `max_norm` (unchanged when it already is): torch.nn.utils.clip_grad_norm_.

    Example: ``oc.adam_update(loss, max_grad_norm=1.0)`` runs it before the Adam steps."""
    if not params:
        return Code()
    with scope("grad_clip"):  # the two one-cell scratch nodes: grad_clip.total, .coef
        total = node("total", output_dims=[1])
        coef = node("coef", output_dims=[1])
    return (_zero(total) + concat(_add_square_norm(total, p) for p in params)
            + _coefficient(coef, total, float(max_norm))
            + concat(_scale(p, coef) for p in params))


def trainable(loss: Tensor) -> list[Tensor]:
    """The params of `loss` an optimizer updates: the differentiable ones (not, e.g., a
    batch_norm layer's running statistics, which an eval graph reads as params)."""
    return [p for p in loss.params() if p.diff]


def check_max_grad_norm(fn: str, max_grad_norm: Any) -> None:
    """None (no clipping) or a finite number > 0."""
    if max_grad_norm is None:
        return
    validate.check_arg_number(fn, "max_grad_norm", max_grad_norm)
    if not math.isfinite(max_grad_norm) or max_grad_norm <= 0:
        validate.fail(ArgumentError, f"{fn}: max_grad_norm must be None or a finite number "
                                     f"> 0, got {max_grad_norm!r}")
