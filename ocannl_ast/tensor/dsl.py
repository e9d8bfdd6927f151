"""The builder namespace rewritten @op / @cd code calls as `__oc__.NAME(...)` (the contract
in `rewrite.contract.Builders`).

Input: calls from rewritten function bodies. Output: Tensors (@op) and Code (@cd).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

from .. import naming
from ..errors import DslSyntaxError, OcannlError, Span, SpecError, at, user_span
from ..infer.spec_scope import substitute
from . import builders, leaves, ops
from .node import Code, Init, NodeRef, Tensor

_FIELDS = ("output_dims", "input_dims", "batch_dims")


def param(name: str, *, span: Span | None = None, **fields: Any) -> Tensor:
    """@op `{w}`, `{w := init}`, `{b, o := [h]}`: a parameter labelled by its name; `span`
    is the declaration's place in the user's source (passed by the rewriter)."""
    with at(span):
        init = fields.pop("init", None)
        dims = {k: fields.pop(k) for k in _FIELDS if k in fields}
        if fields:
            raise DslSyntaxError(f"inline parameter '{name}': unknown field(s) "
                                 f"{', '.join(sorted(fields))}", user_span())
        return leaves.param(name, init=init, **dims)


def node(name: str, *, span: Span | None = None, owner: tuple[Any, ...] = (),
         **fields: Any) -> Tensor:
    """@cd `{x}[...] = ...`: a persistent non-differentiable node. `owner` lists the
    values of the names that may own it (loop variables, then the parameters the function
    updates): the first parameter tensor among them names it, `"<p.name>/<name>"`."""
    with at(span):
        slot = fields.pop("slot", None)
        prec = fields.pop("precision", None)
        dims = {k: fields.pop(k) for k in _FIELDS if k in fields}
        if fields:
            raise DslSyntaxError(f"inline node '{name}': unknown field(s) "
                                 f"{', '.join(sorted(fields))}", user_span())
        p = next((o for o in owner if isinstance(o, Tensor) and o.init is Init.PARAM), None)
        if p is None:
            return leaves.node(name, slot=slot, precision=prec, **dims)
        with naming.state_of(p.name):
            return leaves.node(name, slot=slot, precision=prec, **dims)


def spec_scope(text: str, thunks: Mapping[str, Callable[[], object]]) -> str:
    """A spec literal with its affine coefficients/offsets taken from the Python values
    of the names (`infer.spec_scope`); a name Python does not bind is a SpecError."""
    values: dict[str, object] = {}
    for name, thunk in thunks.items():
        try:
            values[name] = thunk()
        except (NameError, OcannlError):  # unbound local, or no such global
            raise SpecError(
                f"'{name}' stands where only an integer may, but no Python variable '{name}' "
                "is bound here (a variable of an enclosing function is visible only when "
                "the body also uses it outside spec strings)", text, text.index(name),
                user_span()) from None
    try:
        return substitute(text, values)
    except SpecError as e:
        raise e.with_span(user_span()) from None


literal = leaves.literal
name_scope = naming.scope  #: each @op call runs in `name_scope(<its function name>)`
batch = leaves.batch
block_literal = ops.block_literal


def einsum(spec: str, *operands: Any, span: Span | None = None) -> Tensor:
    """A named-index definition with `sum[...]` (or none), located at its statement."""
    with at(span):
        return ops.einsum(spec, *operands)


def concat(spec: str, *operands: Any, span: Span | None = None) -> Tensor:
    """A named-index concatenation `y[a ^ b] = (x[a], z[b])`, located at its statement."""
    with at(span):
        return ops.concat(spec, *operands)


def einsum_max(spec: str, *operands: Any, span: Span | None = None) -> Tensor:
    with at(span):
        if len(operands) not in (1, 2):
            raise DslSyntaxError(f"max reduction takes one operand or two added (tropical), "
                                 f"got {len(operands)}", user_span())
        return ops.einsum_max(spec, *operands)


class CodeCollector(builders.CodeCollector):
    """Collects a @cd body's assignments; a call statement's Code value is included too."""

    def include(self, value: Any) -> None:
        if isinstance(value, Code):
            self.add(value)


def code_collector() -> CodeCollector:
    return CodeCollector()


def accum(target: Any, op: str, rhs: Any, *, span: Span | None = None, **kwargs: Any) -> Code:
    """One assignment of a @cd body; `span` is its statement in the user's source."""
    with at(span):
        return builders.accum(target, op, rhs, **kwargs)


def prim(name: str, *args: Any) -> builders.PrimCall:
    return builders.prim(name, *args)


grad_of = builders.grad_of
value_of = builders.value_of


def rebound(value: Any, name: str, *, span: Span | None = None) -> Any:
    """`name = value` in a @cd body, where nothing reads `name` afterwards: a tensor value
    is an update that never happens, warned at the user's line."""
    if isinstance(value, Tensor | NodeRef | builders.PrimCall):
        message = (f"`{name} = ...` rebinds the Python name `{name}` to a new tensor "
                   "expression that nothing reads afterwards: it updates no tensor. Write "
                   f"`{name} -= ...` / `{name} += ...` or `{name}[...] = ...` to assign into "
                   f"the tensor `{name}`")
        if span is not None:
            warnings.warn_explicit(message, UserWarning, span.file, span.line)
        else:
            warnings.warn(message, UserWarning, stacklevel=2)
    return value


def _dialect_functions() -> dict[str, Callable[..., Any]]:
    import builtins

    from .ops import elementwise as ew
    from .ops import pointwise as pw
    from .ops import ternary

    table: dict[str, Callable[..., Any]] = {
        name: getattr(pw, name) for name in (
            "relu", "relu_gate", "exp", "log", "tanh", "sin", "cos", "sqrt", "recip", "neg",
            "lt", "le", "eq", "ne", "where", "stop_gradient")}
    table.update({name: getattr(ew, name) for name in (
        "sign", "floor", "sigmoid", "clamp", "mod", "exp2", "log2", "recip_sqrt")})
    table["fma"] = ternary.fma
    table["abs"] = ew.dual(builtins.abs, ew.abs_)
    table["round"] = ew.dual(builtins.round, ew.round_)
    return table


#: The dialect's functions, usable anywhere in an @op/@cd body (op_asn and grad_asn
#: included) without an import: a name the body, its module and its closure leave unbound
#: is looked up here before the builtins (`rewrite.decorator`). `abs` and `round` act
#: elementwise on tensors and as the builtins on Python values.
dialect_functions: dict[str, Callable[..., Any]] = _dialect_functions()

