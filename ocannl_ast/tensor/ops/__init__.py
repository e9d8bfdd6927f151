"""The op library by family: `pointwise`, `contraction` (compose, einsum, einsum_max,
concat), `stacking` (stack, block literals), `movement` (transpose, batch_slice, range);
`elementwise` more pointwise ops; `base` builds an operation, `custom` the custom
ones (`unary_op`, `binary_op`). Input: tensors, numbers. Output: result Tensors.
"""

from __future__ import annotations

from .base import alias, apply, lift, make_op
from .custom import binary_op, unary_op
from .elementwise import (
    abs_,
    clamp,
    exp2,
    floor,
    fma,
    log2,
    mod,
    recip_sqrt,
    round_,
    sigmoid,
    sign,
)
from .contraction import concat, einsum, einsum_max, matmul
from .movement import batch_slice, range_, static_index, transpose
from .pointwise import (
    add,
    cos,
    div,
    eq,
    exp,
    le,
    log,
    lt,
    mul,
    ne,
    neg,
    pow_,
    recip,
    relu,
    relu_gate,
    sin,
    sqrt,
    stop_gradient,
    sub,
    tanh,
    where,
)
from .stacking import block_literal, stack

__all__ = [
    "abs_", "clamp", "exp2", "floor", "fma", "log2", "mod", "recip_sqrt", "round_", "sigmoid",
    "sign",
    "add", "alias", "apply", "batch_slice", "binary_op", "block_literal", "concat", "cos",
    "div", "einsum", "einsum_max", "eq", "exp", "le", "lift", "log", "lt", "make_op",
    "matmul", "mul", "ne", "neg", "pow_", "range_", "recip", "relu", "relu_gate", "sin",
    "sqrt", "stack", "static_index", "stop_gradient", "sub", "tanh", "transpose",
    "unary_op", "where",
]
