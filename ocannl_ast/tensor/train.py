"""Training code: gradient update (forward + zero grads + backprop) and OCANNL's SGD with
weight decay, momentum and Nesterov momentum, written as assignment code.

Input: a scalar loss tensor. Output: Code for `Context.compile`.
"""

from __future__ import annotations

from typing import Any

from .builders import accum, prim
from .code import Code, concat
from .leaves import node
from .ops import lift
from .tensor import Tensor


def grad_update(loss: Tensor) -> Code:
    """Forward code, then backprop: after it runs every param's grad is d loss / d param."""
    return loss.forward + loss.backprop


def sgd_one(p: Tensor, *, learning_rate: Any, momentum: float = 0.0,
            weight_decay: float = 0.0, nesterov: bool = False) -> Code:
    """One parameter's SGD step (OCANNL `sgd_one`)."""
    lr = learning_rate if isinstance(learning_rate, Tensor) else lift(learning_rate)
    delta = node("sgd_delta")
    code = accum(delta, "=:", prim("add", p.grad, prim("mul", float(weight_decay), p)))
    if momentum > 0.0:
        mom = node("sgd_momentum")
        code += accum(mom, "=:", prim("add", prim("mul", float(momentum), mom), delta))
        if nesterov:
            code += accum(delta, "=+", prim("mul", float(momentum), mom))
        else:
            code += accum(delta, "=:", mom)
    return code + accum(p, "=-", prim("mul", lr, delta))


def sgd_update(loss: Tensor, *, learning_rate: Any, momentum: float = 0.0,
               weight_decay: float = 0.0, nesterov: bool = False) -> Code:
    """SGD updates of every parameter of the loss (run after `grad_update(loss)`)."""
    return concat(sgd_one(p, learning_rate=learning_rate, momentum=momentum,
                          weight_decay=weight_decay, nesterov=nesterov)
                  for p in loss.params())
