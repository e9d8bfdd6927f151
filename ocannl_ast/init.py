"""`oc.init`: parameter init strategies with torch.nn.init's semantics, for
`oc.param(name, ..., init=...)` and `{w := ...}` in `@oc.op` code.

fan_in is the product of the param's input dims and fan_out the product of its output dims
(a linear weight `f->o` has fan_in f), resolved after shape inference; the values are
deterministic per `oc.set_seed` and the param's name. Example:
``w = oc.param("w", input_dims=[64], output_dims=[32], init=oc.init.kaiming_normal())``.
"""

from __future__ import annotations

from .tensor.init_strategies import (
    InitStrategy,
    kaiming_normal,
    kaiming_uniform,
    normal,
    uniform,
    xavier_normal,
    xavier_uniform,
)

__all__ = ["InitStrategy", "kaiming_normal", "kaiming_uniform", "normal", "uniform",
           "xavier_normal", "xavier_uniform"]
