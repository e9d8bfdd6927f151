"""Data movement: transpose, batch slicing at a static index (OCANNL `@|`) and the range
vector (a `fetch.range_over_offsets`); each op's op_asn, grad_asn and logic side by side.

Input: tensors, static indices, sizes. Output: result Tensors (and StaticIndex handles).
"""

from __future__ import annotations

from typing import Any

from ...errors import ArgumentError, ShapeError
from ...infer.logic import BatchSlice, Transpose
from ...infer.projections import fresh_symbol
from ...rewrite import make_decorator
from .. import precisions, validate
from ..builders import accum
from ..node import CheckItem, Code, NodeRef, StaticIndex, Tensor
from .base import apply
from .fetch import range_over_offsets

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")


@cd
def _copy_op(v, v1, projections):
    v[...] = v1


@cd
def _id_grad(g, g1, projections):
    g1 += g


def transpose(x: Any) -> Tensor:
    """Swap input and output axes (batch axes kept)."""
    return precisions.inherit_ids(apply("transpose", Transpose(), _copy_op, _id_grad, x), x)


# ---- batch slicing ---------------------------------------------------------------------------

def static_index(name: str) -> StaticIndex:
    """A named static argument. Example: ``b = oc.static_index("batch"); x.batch_slice(b)``
    then ``routine(batch=3)``."""
    if not isinstance(name, str) or not name.isidentifier():
        validate.fail(ArgumentError, f"static_index: name must be an identifier "
                      f"string, got {validate.describe(name)}")
    return StaticIndex(fresh_symbol(name))


def _slice_op(v: NodeRef, v1: NodeRef, t1: NodeRef, projections: Any) -> Code:
    sym = projections.logic.symbol
    return (Code((CheckItem(sym, t1.tensor, 1),))
            + accum(v, "=:", v1, projections=projections))


def batch_slice(x: Any, index: StaticIndex) -> Tensor:
    """The tensor at a runtime batch index (OCANNL `@|`)."""
    if not isinstance(index, StaticIndex):
        validate.fail(ArgumentError, "batch_slice takes an oc.static_index(...), got "
                      f"{validate.describe(index)}")
    if isinstance(x, Tensor):
        batch = x.shape.raw_rows()[0]
        if batch.var is None and not batch.beg and not batch.dims:
            validate.fail(ShapeError, f"batch_slice: '{x.label}' has no batch axes (shape "
                          f"{x.shape.describe()}): slicing picks one of its leading batch "
                          "rows; build the data with batch axes, e.g. oc.ndarray(a, "
                          "batch_axes=1)")
    return precisions.inherit_ids(
        apply("batch_slice", BatchSlice(index.symbol), _slice_op, _id_grad, x), x)


# ---- range -----------------------------------------------------------------------------------

def range_(n: int, *, label: str | None = None) -> Tensor:
    """The vector 0, 1, ..., n-1 (computed by its own forward code)."""
    validate.range_args(n, label)
    return range_over_offsets(batch_dims=(), output_dims=(n,), input_dims=(),
                              label=label or "range")
