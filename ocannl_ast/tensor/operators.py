"""Python operators on tensors and node references (`+ - * / ** @`, unary minus, ordering
comparisons), each building its operation (`tensor.ops`), and `Tensor.batch_slice`
(installed here so that `tensor.node` imports no op). Input: operands. Output: Tensors.
"""

from __future__ import annotations

from typing import Any

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


def _batch_slice(self: Tensor, index: Any) -> Tensor:
    """The tensor at a runtime batch index (OCANNL `@|`): drops the leading batch axis."""
    return ops.batch_slice(self, index)


_install(Tensor)
setattr(Tensor, "batch_slice", _batch_slice)  # noqa: B010  (typed on Tensor)
_install(NodeRef)
_install(PrimCall)
_install(StaticIndex)
