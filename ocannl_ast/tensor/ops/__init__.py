"""The op library by family: `pointwise`, `contraction` (compose, einsum, einsum_max,
concat), `stacking` (stack, block literals), `movement` (transpose, batch_slice, range);
`elementwise` more pointwise ops; `ternary` (fma, einsum3), `with_spec` (pointwise ops under
a spec), `capture` (DimRef, set_dim); `base` builds an operation, `custom` the custom ones
(`unary_op`, `binary_op`). Input: tensors, numbers. Output: result Tensors.
"""

from __future__ import annotations

from .base import alias, apply, lift, make_op
from .capture import DimRef, capture, dim_of, set_dim, set_equal
from .contraction import concat, einsum, einsum_max, matmul
from .custom import binary_op, unary_op
from .elementwise import (
    abs_,
    clamp,
    exp2,
    floor,
    log2,
    mod,
    recip_sqrt,
    round_,
    sigmoid,
    sign,
)
from .movement import batch_slice, range_, static_index, transpose
from .pointwise import (
    add,
    cast,
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
from .ternary import einsum3, fma

__all__ = [
    "DimRef",
    "abs_",
    "add",
    "alias",
    "apply",
    "batch_slice",
    "binary_op",
    "block_literal",
    "capture",
    "cast",
    "clamp",
    "concat",
    "cos",
    "dim_of",
    "div",
    "einsum",
    "einsum3",
    "einsum_max",
    "eq",
    "exp",
    "exp2",
    "floor",
    "fma",
    "le",
    "lift",
    "log",
    "log2",
    "lt",
    "make_op",
    "matmul",
    "mod",
    "mul",
    "ne",
    "neg",
    "pow_",
    "range_",
    "recip",
    "recip_sqrt",
    "relu",
    "relu_gate",
    "round_",
    "set_dim",
    "set_equal",
    "sigmoid",
    "sign",
    "sin",
    "sqrt",
    "stack",
    "static_index",
    "stop_gradient",
    "sub",
    "tanh",
    "transpose",
    "unary_op",
    "where",
]
