"""Python operators on tensors and node references (`+ - * / ** @`, unary minus, ordering
comparisons), each building its operation (`tensor.ops`), and `Tensor.batch_slice`
(installed here so that `tensor.node` imports no op). Input: operands. Output: Tensors.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ..errors import ArgumentError, user_span
from . import ops
from .builders import PrimCall
from .node import NodeRef, StaticIndex, Tensor


def _install(cls: type) -> None:
    def binary(f: Any, swap: bool = False) -> Any:
        return (lambda self, other: f(other, self)) if swap else (lambda self, other: f(self, other))

    table = {
        "__add__": binary(ops.add), "__radd__": binary(ops.add, True),
        "__sub__": binary(ops.sub), "__rsub__": binary(ops.sub, True),
        "__mul__": binary(ops.mul), "__rmul__": binary(ops.mul, True),
        "__truediv__": binary(ops.div), "__rtruediv__": binary(ops.div, True),
        "__pow__": binary(ops.pow_), "__rpow__": binary(ops.pow_, True),
        "__matmul__": binary(ops.matmul), "__rmatmul__": binary(ops.matmul, True),
        "__lt__": binary(ops.lt), "__le__": binary(ops.le),
        "__gt__": binary(ops.lt, True), "__ge__": binary(ops.le, True),
        "__neg__": lambda self: ops.neg(self),
    }
    for name, fn in table.items():
        setattr(cls, name, fn)


# ---- NumPy's protocols -------------------------------------------------------------------
#
# A Tensor is an expression, not an array. NumPy's arithmetic operators with a tensor operand
# (`arr * t`, `np.float32(2) * t`) build the same operation as Python's; every other NumPy
# function or ufunc refuses with a located error naming the ocannl_ast function to use —
# otherwise `np.sum(t * t)` silently returns `t * t` and `np.mean(t)` returns `t / 1`.

_UFUNC_OPS: dict[Any, Any] = {
    np.add: ops.add, np.subtract: ops.sub, np.multiply: ops.mul, np.true_divide: ops.div,
    np.power: ops.pow_, np.matmul: ops.matmul, np.less: ops.lt, np.less_equal: ops.le,
    np.greater: lambda a, b: ops.lt(b, a), np.greater_equal: lambda a, b: ops.le(b, a),
    np.negative: ops.neg,
}

#: NumPy functions whose ocannl_ast counterpart has another name
_COUNTERPARTS = {
    "sum": 'oc.einsum("...=>", x) (the sum over every axis; docs/einsum.md)',
    "mean": 'oc.einsum("...=>", x) * (1.0 / n)',
    "max": 'oc.einsum_max', "amax": 'oc.einsum_max',
    "dot": "@ (or oc.einsum)", "matmul": "@ (or oc.einsum)", "einsum": "oc.einsum",
    "reciprocal": "oc.recip", "maximum": "oc.relu or oc.where", "minimum": "oc.where",
    "array": "oc.ndarray", "asarray": "oc.eval(t) for its value",
}


def _hint(name: str) -> str:
    """What to call instead of NumPy's `name`."""
    if name in _COUNTERPARTS:
        return _COUNTERPARTS[name]
    pkg = sys.modules.get("ocannl_ast")
    if pkg is not None and callable(getattr(pkg, name, None)):
        return f"oc.{name}"
    return "the ocannl_ast operations (docs/einsum.md, docs/dialect.md)"


def _refuse(what: str, name: str) -> Any:
    hint = _hint(name)
    read = "" if "oc.eval" in hint else "; read a value with oc.eval(t) or ctx.eval(t)"
    raise ArgumentError(f"{what} cannot take an ocannl_ast Tensor (an expression, not an "
                        f"array): use {hint}{read}", user_span())


def _array_ufunc(self: Any, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
    op = _UFUNC_OPS.get(ufunc)
    if op is not None and method == "__call__" and not kwargs:
        return op(*inputs)
    what = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    return _refuse(what, ufunc.__name__)


def _array_function(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    return _refuse(f"numpy.{func.__name__}", func.__name__)


def _array(self: Any, dtype: Any = None, copy: Any = None) -> Any:
    return _refuse("numpy.asarray (or np.array)", "asarray")


def _install_numpy(cls: type) -> None:
    cls.__array_ufunc__ = _array_ufunc  # type: ignore[attr-defined]
    cls.__array_function__ = _array_function  # type: ignore[attr-defined]
    cls.__array__ = _array  # type: ignore[attr-defined]


def _batch_slice(self: Tensor, index: Any) -> Tensor:
    """The tensor at a runtime batch index (OCANNL `@|`): drops the leading batch axis."""
    return ops.batch_slice(self, index)


_install(Tensor)
_install_numpy(Tensor)
setattr(Tensor, "batch_slice", _batch_slice)  # noqa: B010  (typed on Tensor)
_install(NodeRef)
_install_numpy(NodeRef)
_install(PrimCall)
_install(StaticIndex)
