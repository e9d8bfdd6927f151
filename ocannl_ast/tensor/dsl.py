"""The builder namespace rewritten @op / @cd code calls as `__oc__.NAME(...)` (the contract
in `rewrite.contract.Builders`).

Input: calls from rewritten function bodies. Output: Tensors (@op) and Code (@cd).
"""

from __future__ import annotations

from typing import Any

from ..errors import DslSyntaxError, user_span
from . import builders, leaves, ops
from .code import Code
from .tensor import Tensor

_FIELDS = ("output_dims", "input_dims", "batch_dims")


def _label(name: str, scope: str) -> str:
    return name


def param(name: str, scope: str, **fields: Any) -> Tensor:
    """@op `{w}`, `{w := init}`, `{b, o := [h]}`: a parameter labelled by its name."""
    init = fields.pop("init", None)
    dims = {k: fields.pop(k) for k in _FIELDS if k in fields}
    if fields:
        raise DslSyntaxError(f"inline parameter '{name}': unknown field(s) "
                          f"{', '.join(sorted(fields))}", user_span())
    return leaves.param(_label(name, scope), init=init, **dims)


def node(name: str, scope: str, **fields: Any) -> Tensor:
    """@cd `{x}[...] = ...`: a persistent non-differentiable node."""
    slot = fields.pop("slot", None)
    dims = {k: fields.pop(k) for k in _FIELDS if k in fields}
    if fields:
        raise DslSyntaxError(f"inline node '{name}': unknown field(s) {', '.join(sorted(fields))}",
                          user_span())
    return leaves.node(_label(name, scope), scope, slot=slot, **dims)


literal = leaves.literal
batch = leaves.batch
einsum = ops.einsum
concat = ops.concat


def einsum_max(spec: str, *operands: Any) -> Tensor:
    if len(operands) not in (1, 2):
        raise DslSyntaxError(f"max reduction takes one operand or two added (tropical), got "
                          f"{len(operands)}", user_span())
    return ops.einsum_max(spec, *operands)


class CodeCollector(builders.CodeCollector):
    """Collects a @cd body's assignments; a call statement's Code value is included too."""

    def include(self, value: Any) -> None:
        if isinstance(value, Code):
            self.add(value)


def code_collector() -> CodeCollector:
    return CodeCollector()


def accum(target: Any, op: str, rhs: Any, **kwargs: Any) -> Code:
    return builders.accum(target, op, rhs, **kwargs)


def prim(name: str, *args: Any) -> builders.PrimCall:
    return builders.prim(name, *args)


grad_of = builders.grad_of
value_of = builders.value_of


