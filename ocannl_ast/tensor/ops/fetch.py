"""Fetch ops as public tensors (OCANNL's `Fetch` assignments): a small constant array
unrolled into the code, each cell's own linear offset, the tensor's own id, a static
index's run-time value, and a solved dimension. Each is a computed tensor whose forward
code is one fetch (or one `=:` of a static value), so it can be used in any expression.

Input: values, dims, static indices, tensors. Output: Tensors.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...errors import ArgumentError, user_span
from ...infer.shape import DimsArg, Shape
from ...lowering import assignments as A
from .. import validate
from ..builders import accum
from ..leaves import literal_array
from ..node import Code, EmbedDim, FetchItem, Init, NodeKind, NodeRef, StaticIndex, Tensor

#: constant_fill unrolls one store per cell: beyond this, use oc.ndarray (data held out)
MAX_UNROLLED = 4096

ROW_KINDS = ("batch", "output", "input")


def _computed(label: str, *, batch_dims: DimsArg = (), output_dims: DimsArg = (1,),
              input_dims: DimsArg = ()) -> Tensor:
    shape = Shape.make(label, batch_dims=batch_dims, output_dims=output_dims,
                       input_dims=input_dims, is_terminal=True, span=user_span())
    return Tensor(label, shape, Init.COMPUTED)


def _owns(t: Tensor, code: Code) -> Tensor:
    t._own = code
    t._fwd = {t.id: t}
    return t


def constant_fill(values: Any, *, batch_axes: int = 0, input_axes: int = 0,
                  label: str | None = None) -> Tensor:
    """A small array unrolled into the compiled code (OCANNL's `Constant_fill`), not data
    held out: values are laid out batch/output/input exactly like `oc.ndarray` (lists are
    output axes, tuples input axes, `oc.batch([...])` batch axes). At most 4096 cells.

    Example: ``oc.eval(oc.constant_fill([1.0, 2.0, 3.0]) * 2.0)`` is ``[2, 4, 6]``.
    """
    validate.ndarray_args(values, batch_axes, input_axes, label, "prohibit")
    arr, nb, no, _ni = literal_array(values, batch_axes, input_axes)
    if arr.size > MAX_UNROLLED:
        validate.fail(ArgumentError, f"constant_fill: {arr.size} cells is more than the "
                                     f"{MAX_UNROLLED} unrolled into code; use oc.ndarray")
    d = arr.shape
    t = _computed(label or "constant_fill", batch_dims=d[:nb], output_dims=d[nb:nb + no],
                  input_dims=d[nb + no:])
    vals = tuple(float(v) for v in np.ascontiguousarray(arr).reshape(-1))
    op: A.FetchOp = A.ConstantValues(vals) if vals else A.ConstantFill(0.0)
    return _owns(t, Code((FetchItem(NodeRef(t, NodeKind.VALUE), op),)))


def range_over_offsets(*, batch_dims: DimsArg = None, output_dims: DimsArg = None,
                       input_dims: DimsArg = None, label: str | None = None) -> Tensor:
    """Each cell holds its own linear offset in layout order (batch, output, input):
    OCANNL's `Range_over_offsets`. Dims left None are inferred from use (a row given
    as None may have any number of axes). Offsets are exact up to 2**24 in float32.

    Example: ``oc.eval(oc.range_over_offsets(output_dims=[2], input_dims=[3]))`` is
    ``[[0, 1, 2], [3, 4, 5]]``; ``oc.ndarray([1.0, 2.0]) + oc.range_over_offsets()`` is
    ``[1, 3]``.
    """
    validate.leaf_args("range_over_offsets", label or "range_over_offsets", output_dims,
                       input_dims, batch_dims, None)
    t = _computed(label or "range_over_offsets", batch_dims=batch_dims,
                  output_dims=output_dims, input_dims=input_dims)
    return _owns(t, Code((FetchItem(NodeRef(t, NodeKind.VALUE), A.RangeOverOffsets()),)))


def embed_self_id(*, label: str | None = None) -> Tensor:
    """A one-cell tensor holding its own id: `t.id`, the integer every tensor gets at
    creation (1, 2, ... in creation order within the process; the buffers are numbered
    from it). It is fixed for the tensor's lifetime, so every routine that computes this
    tensor sees the same value. (The default param init keys its threefry stream by the
    param's name instead, see `oc.param`.)

    Example: ``i = oc.embed_self_id(); oc.eval(i)[0] == i.id``.
    """
    validate.check_str("embed_self_id", "label", label, optional=True)
    t = _computed(label or "embed_self_id")
    return _owns(t, Code((FetchItem(NodeRef(t, NodeKind.VALUE), A.ConstantFill(float(t.id))),)))


def embed_symbol(index: StaticIndex, *, label: str | None = None) -> Tensor:
    """A one-cell tensor holding a static index's value at run time (the routine takes it
    as a static argument), e.g. the step number of a training loop.

    Example: ``step = oc.static_index("step"); lr = 0.1 / (1.0 + oc.embed_symbol(step))``;
    a routine computing ``lr`` is then called as ``routine(step=3)``.
    """
    if not isinstance(index, StaticIndex):
        validate.fail(ArgumentError, "embed_symbol takes an oc.static_index(...), got "
                      f"{validate.describe(index)}")
    validate.check_str("embed_symbol", "label", label, optional=True)
    t = _computed(label or f"embed_{index.symbol.name}")
    return _owns(t, accum(t, "=:", index))


def embed_dim(tensor: Any, kind: str = "output", axis: int = -1, *,
              label: str | None = None) -> Tensor:
    """A one-cell tensor holding a solved dimension of `tensor`: the size of its axis
    `axis` in row `kind` ("batch", "output" or "input"), resolved after shape closing
    (so it may be inferred from any use of `tensor`).

    Example: ``x = oc.term("x"); n = oc.embed_dim(x)``: after ``x`` is used with 5
    outputs, ``n`` holds 5.0 (a mean: ``oc.einsum("i=>", x) / oc.embed_dim(x)``).
    """
    validate.check_tensors("embed_dim", "tensor", (tensor,))
    validate.check_choice("embed_dim", "kind", kind, ROW_KINDS)
    if not validate.is_int(axis):
        validate.fail(ArgumentError, f"embed_dim: axis must be an int, got "
                                     f"{validate.describe(axis)}")
    validate.check_str("embed_dim", "label", label, optional=True)
    t = _computed(label or f"dim_{tensor.label}")
    op = EmbedDim(tensor, kind, int(axis), user_span())
    return _owns(t, Code((FetchItem(NodeRef(t, NodeKind.VALUE), op),)))

