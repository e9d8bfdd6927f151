"""Positions of a sequence `batch|seq,features`: a learned positional embedding, the fixed
sinusoidal table of "Attention Is All You Need", and rotary embeddings (RoPE). Written in
the @op dialect; the sin/cos tables are computed in the routine from position indices.

Input: tensors `batch|s,f`. Output: tensors (and layer factories).
"""

# Tensor arithmetic operators are installed at import (tensor.operators): mypy cannot see them.
# mypy: ignore-errors

from __future__ import annotations

import math
from typing import Any

from .errors import ArgumentError, ShapeError
from .infer.terms import dim_size
from .rewrite import make_decorator
from .tensor import validate
from .tensor.init_strategies import normal
from .tensor.leaves import param
from .tensor.node import Tensor
from .tensor.ops import concat, cos, einsum, exp, sin, stop_gradient
from .tensor.ops.fetch import range_over_offsets

op = make_decorator("op", "ocannl_ast.tensor.dsl")

#: the sequence axis s and feature axis f of `x`
_SEQ = "..b..|s,f => s"
#: broadcast an `s,f` table over `x` (ones shaped like x first): ties s and f to x's
_OVER_X = "..b..|s,f; s,f => ..b..|s,f"
#: the even / odd features (2i, 2i+1) of the last axis, and back
_EVEN, _ODD = "..b..|s,2*i => ..b..|s,i", "..b..|s,2*i+1 => ..b..|s,i"
_TO_EVEN, _TO_ODD = "..b..|s,i => ..b..|s,2*i", "..b..|s,i => ..b..|s,2*i+1"


@op
def positional_embedding(max_len):
    """A learned position table: `layer(x)`, x of shape `batch|s,f` with `s <= max_len`,
    is `x + table[:s]`. The table `pos_table` has input axis `max_len` and output axis `f`
    (inferred from x), stored as (f, max_len), as `oc.nn.embedding`'s table, and starts as
    that table does (as `torch.nn.Embedding`): normal with mean 0 and std 1.

    Example: ``h = oc.nn.positional_embedding(64)(oc.nn.embedding(vocab, 32)(ids))``."""
    if not validate.is_int(max_len) or max_len <= 0:
        validate.fail(ArgumentError, "positional_embedding: max_len must be a positive int, "
                                     f"got {validate.describe(max_len)}")
    # made after the check (an inline declaration would be hoisted above it)
    table = param("pos_table", input_dims=[max_len], init=normal(1.0))

    def layer(x):
        validate.check_tensor("positional_embedding", "x", x)
        seq, _ = _seq_and_features("positional_embedding", x)
        if seq is not None and seq > max_len:
            validate.fail(ShapeError, f"positional_embedding: the sequence has {seq} "
                                      f"positions (x: {x.shape}), more than max_len={max_len}")
        return x + einsum(_OVER_X, _ones(x), concat("s^r->f => s,f", table))

    return layer


@op
def sinusoidal_positions(x):
    """The fixed positional table (s, f) of "Attention Is All You Need" for x `batch|s,f`
    (f even): `pe[p, 2i] = sin(p w_i)`, `pe[p, 2i+1] = cos(p w_i)`, `w_i = 10000^(-2i/f)`.
    Output axes `s, f` (no batch): add it to x, `x + oc.nn.sinusoidal_positions(x)`.

    Example: ``oc.eval(oc.nn.sinusoidal_positions(x))[1, 0]`` is ``sin(1.0)`` (0.8415)."""
    validate.check_tensor("sinusoidal_positions", "x", x)
    _seq_and_features("sinusoidal_positions", x, even=True)
    half = einsum(_EVEN, stop_gradient(x))
    angle = _angles(x, half, 10000.0)
    return einsum("s,i => s,2*i", sin(angle)) + einsum("s,i => s,2*i+1", cos(angle))


@op
def rope(x, *, base=10000.0):
    """Rotary position embedding of x `batch|s,f` (f even): each pair of features
    (2i, 2i+1) at position p is rotated by the angle `p * base^(-2i/f)`:
    `(x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos)` (as OCANNL and the RoFormer paper;
    apply it to queries and keys). Differentiable in x.

    Example: ``q = oc.nn.rope(q)``."""
    validate.check_tensor("rope", "x", x)
    validate.check_arg_number("rope", "base", base)
    if not math.isfinite(base) or base <= 1.0:
        validate.fail(ArgumentError, f"rope: base must be a finite number > 1, got {base!r}")
    _seq_and_features("rope", x, even=True)
    x0, x1 = einsum(_EVEN, x), einsum(_ODD, x)
    angle = _angles(x, x0, float(base))
    c, s = cos(angle), sin(angle)
    return einsum(_TO_EVEN, x0 * c - x1 * s) + einsum(_TO_ODD, x0 * s + x1 * c)


def _angles(x: Tensor, half: Tensor, base: float) -> Tensor:
    """`angle[p, i] = p * base^(-2i/f)` over the positions of x and the pair index of
    `half` (x's even features), computed in the routine."""
    pos = einsum("s; s => s", _ones_along(_SEQ, x), range_over_offsets())
    ones_i = _ones_along("..b..|s,i => i", half)
    index = einsum("i; i => i", ones_i, range_over_offsets())
    n_pairs = einsum("i => ", ones_i)
    freq = exp(index * -math.log(base) / n_pairs)
    return einsum("s; i => s,i", pos, freq)


def _ones(x: Tensor) -> Tensor:
    return 0.0 * stop_gradient(x) + 1.0


def _ones_along(spec: str, x: Tensor) -> Tensor:
    """Ones over the axes `spec` keeps of x (sized by x, any value of x)."""
    return einsum(spec, 0.0 * stop_gradient(x)) + 1.0


def _seq_and_features(fn: str, x: Tensor, *, even: bool = False) -> tuple[Any, Any]:
    """x's sequence length and feature count where inference knows them now (else None);
    a located error when x has not exactly two output axes or (`even`) f is odd."""
    _, o, i = x.shape.rows_now()
    if i.var is None and i.dims:
        validate.fail(ShapeError, f"{fn}: x must be batch|seq,features without input axes, "
                                  f"got {x.shape}")
    if o.var is not None:
        return None, None
    if len(o.dims) != 2:
        validate.fail(ShapeError, f"{fn}: x must have two output axes (seq, features), "
                                  f"got {x.shape}")
    seq, feats = dim_size(o.dims[0]), dim_size(o.dims[1])
    if even and feats is not None and feats % 2:
        validate.fail(ShapeError, f"{fn}: the feature axis must have an even size (pairs "
                                  f"2i, 2i+1), got {feats} (x: {x.shape})")
    return seq, feats
