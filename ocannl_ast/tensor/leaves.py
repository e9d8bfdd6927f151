"""Leaf tensors: data constants (`ndarray`, `number`), parameters, terms (data the caller
sets), persistent @cd nodes; literal parsing (list = output axis, tuple = input axis,
`batch([...])` = batch axis). Input: numbers, nested lists/tuples, NumPy arrays.
Output: Tensors."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import naming
from ..errors import ArgumentError, RuntimeDataError, ShapeError, user_span
from ..infer.constraints import Origin, RowEq
from ..infer.shape import DimsArg, Shape, join_shapes
from ..lowering.loop_ir import Precision
from . import precisions, validate
from .builders import accum
from .init_strategies import InitStrategy
from .node import BatchList, Init, Tensor, current_record, no_grad


def batch(values: Sequence[Any]) -> BatchList:
    """Mark the outer level of a literal as batch axes. Example: ``batch([[1, 2], [3, 4]])``."""
    return BatchList(values)


def _levels(values: Any) -> list[str]:
    """Axis kinds of a nested literal, outermost first: "batch", "output" or "input"."""
    kinds: list[str] = []
    v = values
    while isinstance(v, list | tuple):
        kinds.append("batch" if isinstance(v, BatchList) else
                     "input" if isinstance(v, tuple) else "output")
        if not v:
            break
        v = v[0]
    return kinds


def literal_array(values: Any, batch_axes: int = 0,
                  input_axes: int = 0) -> tuple[np.ndarray, int, int, int]:
    """A literal as an array in layout order (batch, output, input) with the row lengths."""
    if isinstance(values, np.ndarray) or not isinstance(values, list | tuple):
        arr = np.asarray(values, dtype=np.float64)
        kinds = None
    else:
        kinds = _levels(values)
        try:
            arr = np.asarray(values, dtype=np.float64)
        except ValueError as e:
            raise RuntimeDataError(f"ragged or non-numeric literal: {e}", user_span()) from None
        if arr.ndim != len(kinds):
            raise RuntimeDataError("ragged literal: every level must have the same length",
                                   user_span())
    nd = arr.ndim
    if kinds is None or all(k == "output" for k in kinds):
        if batch_axes + input_axes > nd:
            raise ShapeError(f"batch_axes={batch_axes} + input_axes={input_axes} exceed the "
                             f"{nd} axes of the data", user_span())
        return arr, batch_axes, nd - batch_axes - input_axes, input_axes
    order = ([i for i, k in enumerate(kinds) if k == "batch"]
             + [i for i, k in enumerate(kinds) if k == "output"]
             + [i for i, k in enumerate(kinds) if k == "input"])
    nb, ni = kinds.count("batch"), kinds.count("input")
    return np.transpose(arr, order), nb, nd - nb - ni, ni


GRAD_SPECS = ("require", "prohibit", "if_needed")


def _wants_grad(spec: str, default: bool) -> bool:
    """Gradient spec of a leaf (OCANNL Require_grad / Prohibit_grad / If_needed)."""
    if spec not in GRAD_SPECS:
        raise ArgumentError(f"grad_spec must be one of {GRAD_SPECS}, got {spec!r}", user_span())
    return spec == "require" or (spec == "if_needed" and default)


def ndarray(values: Any, *, batch_axes: int = 0, input_axes: int = 0,
            label: str | None = None, grad_spec: str = "prohibit",
            precision: str | None = None) -> Tensor:
    """Non-differentiable constant data. Example: ``ndarray([(1, 2), (3, 4)])`` has shape
    ``2->2``... as OCANNL's `[ (1, 2); (3, 4) ]`: outputs 2, inputs 2. `precision`: how
    its cells are stored (None: the context's; "uint32", "uint64", "int32" for ids;
    `tensor.precisions`)."""
    validate.ndarray_args(values, batch_axes, input_axes, label, grad_spec)
    prec = precisions.parse("ndarray", precision, integers=True)
    arr, nb, no, _ni = literal_array(values, batch_axes, input_axes)
    dims = arr.shape
    shape = Shape.make(label or "ndarray", batch_dims=dims[:nb], output_dims=dims[nb:nb + no],
                       input_dims=dims[nb + no:], is_terminal=True)
    t = Tensor(label or "ndarray", shape, Init.CONST, diff=_wants_grad(grad_spec, False))
    _no_integer_grad("ndarray", t, prec)
    if prec is not None:
        if prec.is_integer:  # checked now, at the user's line, as ctx.set would
            exact = isinstance(values, np.ndarray) and values.dtype.kind in "iu"
            arr = precisions.host_values(prec, t.label, values.reshape(arr.shape) if exact
                                         else arr)  # integer data: not through float64
        t.precision = prec
    t.init_value = np.ascontiguousarray(arr)
    return t


def literal(values: Any) -> Tensor:
    """A tensor literal from @op code (`[(1, 2), (3, 4)]`, `batch([...])`)."""
    return ndarray(values, label="literal")


def number(x: float, *, label: str | None = None) -> Tensor:
    """A scalar constant (one output axis of size 1). Example: ``number(2.0)``."""
    validate.number_args(x, label)
    shape = Shape.make(label or str(x), batch_dims=(), output_dims=(1,), input_dims=(),
                       is_terminal=True)
    t = Tensor(label or _num_label(x), shape, Init.CONST)
    t.init_value = float(x)
    return t


def filled(dims: Sequence[int], x: float, *, label: str) -> Tensor:
    """A constant of `dims` (output axes) with `x` in every cell: filled by the routine, and
    read as the number `x` where the compiler folds constants (`lowering.fold_constants`),
    as `number`. Example: ``filled([2, 2], 1.0, label="window")``."""
    shape = Shape.make(label, batch_dims=(), output_dims=tuple(dims), input_dims=(),
                       is_terminal=True)
    t = Tensor(label, shape, Init.CONST)
    t.init_value = float(x)
    return t


def _num_label(x: float) -> str:
    return f"{x:g}".replace("-", "neg").replace(".", "_").replace("+", "")


def param(name: str, *, output_dims: DimsArg = None, input_dims: DimsArg = None,
          batch_dims: DimsArg = None, init: Any = None, grad_spec: str = "require",
          precision: str | None = None) -> Tensor:
    """A differentiable parameter; output/input dims left None are inferred; batch dims
    default to none (as in OCANNL: a parameter is shared across the batch). init: None
    (uniform random in [-1, 1)), a number, an array, a Tensor, or an `oc.init` strategy
    (e.g. ``oc.init.normal(0.02)``, resolved against the inferred dims: fan_in is the
    product of the input dims, fan_out of the output dims).

    The default init is seed 001's expression ``uint4x32_to_prec_uniform(threefry4x32(
    threefry4x32(embed_self_id, random_seed), range_over_offsets))`` scaled to [-1, 1):
    deterministic per `oc.set_seed` and per the param's unique hierarchical name
    (`tensor.name`, e.g. "mlp.linear_1.w"; see `ocannl_ast.naming`), so unrelated tensors
    created first do not change it and two params both declared "w" still differ.

    `precision`: how its value (and gradient) cells are stored, e.g. "bfloat16" in a float32
    context, or "float32" (a master copy) in a bfloat16 one; None: the context's.

    Example: ``w = param("w", input_dims=[2], output_dims=[16])``.
    """
    validate.leaf_args("param", name, output_dims, input_dims, batch_dims, grad_spec)
    prec = precisions.parse("param", precision, integers=False)
    if not isinstance(init, InitStrategy):
        validate.param_init(init)
    if isinstance(init, np.ndarray | list | tuple) and output_dims is None and \
            input_dims is None and batch_dims is None:
        arr, nb, no, _ni = literal_array(init)
        d = arr.shape
        batch_dims, output_dims, input_dims = d[:nb], d[nb:nb + no], d[nb + no:]
        init = arr
    shape = Shape.make(name, batch_dims=() if batch_dims is None else batch_dims,
                       output_dims=output_dims, input_dims=input_dims, is_param=True,
                       span=user_span())
    t = Tensor(name, shape, Init.PARAM, diff=_wants_grad(grad_spec, True),
               name=naming.declare(name))
    t.init_key = (t.name, 0)
    t.init_value = init
    t.precision = prec
    if isinstance(init, Tensor):
        with no_grad():  # the init expression is computed once, by the init routine
            t.init_code = init.forward_all() + accum(t.value, "=:", init)
    return t


def term(name: str, *, output_dims: DimsArg = None, input_dims: DimsArg = None,
         batch_dims: DimsArg = None, grad_spec: str = "prohibit",
         precision: str | None = None) -> Tensor:
    """A placeholder whose value the caller sets (``ctx.set``); with
    ``grad_spec="require"`` backprop also computes its gradient (e.g. w.r.t. inputs).
    `precision`: how its cells are stored, as `ndarray`'s."""
    validate.leaf_args("term", name, output_dims, input_dims, batch_dims, grad_spec)
    prec = precisions.parse("term", precision, integers=True)
    shape = Shape.make(name, batch_dims=batch_dims, output_dims=output_dims,
                       input_dims=input_dims, is_terminal=True)
    t = Tensor(name, shape, Init.CONST, diff=_wants_grad(grad_spec, False),
               name=naming.declare(name))
    _no_integer_grad("term", t, prec)
    t.precision = prec
    return t


def _no_integer_grad(fn: str, t: Tensor, prec: Any) -> None:
    if t.diff and prec is not None and prec.is_integer:
        raise ArgumentError(f"{fn}: '{t.label}' is differentiable (grad_spec), but its "
                            f"precision {prec.value} is an integer one: ids have no gradient",
                            user_span())


def _slot_number(slot: str) -> int | None:
    """"lhs" is slot 0, "rhsK" slot K (K >= 1); anything else None."""
    if slot == "lhs":
        return 0
    digits = slot.removeprefix("rhs")
    return int(digits) if slot.startswith("rhs") and digits.isdigit() and digits[0] != "0" \
        else None


def node(name: str, *, slot: str | None = None, output_dims: DimsArg = None,
         input_dims: DimsArg = None, batch_dims: DimsArg = None,
         precision: str | None = None) -> Tensor:
    """A persistent non-differentiable node declared inline in @cd code (`{x}[...] = ...`);
    zeros until written. With `slot` ("lhs", "rhs1", ...) it takes that slot's shape in the
    operation whose projections are in context. `precision`: a float one, or "compute" (the
    routine's arithmetic: float32 in a 16-bit context), for state that 16-bit cells would
    stall (a counter, a running product)."""
    validate.leaf_args("node", name, output_dims, input_dims, batch_dims, None)
    prec = (Precision.COMPUTE if precision == "compute" else
            precisions.parse("node", precision, integers=False))
    shape = Shape.make(name, batch_dims=batch_dims, output_dims=output_dims,
                       input_dims=input_dims)
    t = Tensor(name, shape, Init.NODE, name=naming.declare(name))
    t.precision = prec
    naming.note_state(t)  # optimizer state of a param: renamed with it
    if slot is not None:
        rec = current_record.get()
        k = _slot_number(slot)
        if k is None or rec is None or k > len(rec.operands):
            raise ShapeError(f"'{name}': slot '{slot}' needs an operation in context with "
                             "that slot (lhs, rhs1, rhs2, ...)", user_span())
        other = [rec.result, *rec.operands][k]
        o = Origin(f"slot {slot} of {rec.name}", (shape, other.shape), user_span())
        join_shapes(shape, other.shape).add([RowEq(shape.raw_rows()[i], other.shape.raw_rows()[i], o)
                          for i in range(3)])
        t.slot = k
    return t
