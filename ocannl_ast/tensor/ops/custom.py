"""Custom operations (`oc.unary_op`, `oc.binary_op`) whose op_asn / grad_asn take extra
arguments besides their slot names: `clamp_op(v, v1, projections, lo, hi)` makes an
operation called as `op(x, lo=-1.0, hi=1.0)` — no factory closure needed.

Input: the pair of @cd functions, the shape logic, a name. Output: the operation, taking
exactly its tensors positionally and the extra arguments by keyword.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ...errors import ArgumentError
from ...infer.logic import Logic, logic_of_string
from .. import validate
from ..node import slot_of_name
from .base import Asn, apply

#: bound (op_asn, extras) pairs, so one operation built twice shares its functions
_BOUND: dict[tuple[Any, ...], Asn] = {}


def _params(fn: Callable[..., Any]) -> list[inspect.Parameter]:
    return list(inspect.signature(fn).parameters.values())


def extra_params(fn: Callable[..., Any] | None) -> list[inspect.Parameter]:
    """The parameters of an op_asn / grad_asn that are neither slot names nor
    `projections`: the operation's extra arguments."""
    if fn is None:
        return []
    return [p for p in _params(fn)
            if p.name != "projections" and slot_of_name(p.name) is None]


def bind(fn: Asn | None, extras: Mapping[str, Any]) -> Asn | None:
    """`fn` with its extra parameters fixed to `extras` (those it names), seen by the
    slot-argument convention as a function of its slot parameters only."""
    if fn is None:
        return None
    wanted = {p.name for p in extra_params(fn)}
    if not wanted:
        return fn
    mine = {k: v for k, v in extras.items() if k in wanted}
    try:
        key: tuple[Any, ...] | None = (fn, tuple(sorted(mine.items())))
        hash(key)
    except TypeError:  # an unhashable extra (a list): bind without sharing
        key = None
    if key is not None and key in _BOUND:
        return _BOUND[key]
    slots = [p for p in _params(fn) if p.name not in wanted]

    @functools.wraps(fn)
    def bound(**kwargs: Any) -> Any:
        return fn(**kwargs, **mine)

    del bound.__wrapped__  # the slot convention reads the signature below, not fn's
    bound.__signature__ = inspect.Signature(slots)  # type: ignore[attr-defined]
    if key is not None:
        _BOUND[key] = bound
    return bound


def operation(kind: str, n: int, name: str, logic: Logic, op_asn: Asn,
              grad_asn: Asn | None) -> Callable[..., Any]:
    """The operation: `n` tensors positionally, the extra arguments by keyword."""
    params: dict[str, inspect.Parameter] = {}
    for p in (*extra_params(op_asn), *extra_params(grad_asn)):
        params.setdefault(p.name, p)
    required = [k for k, p in params.items() if p.default is inspect.Parameter.empty]

    def op(*xs: Any, **extras: Any) -> Any:
        if len(xs) != n:
            validate.fail(ArgumentError, f"{name} takes {n} tensor(s), got {len(xs)} "
                                         "positional (extra arguments go by keyword)")
        unknown = sorted(set(extras) - set(params))
        if unknown:
            offered = ", ".join(params) or "none"
            validate.fail(ArgumentError, f"{name}: unknown keyword argument(s) "
                                         f"{', '.join(unknown)} (its extra arguments: {offered})")
        missing = [k for k in required if k not in extras]
        if missing:
            validate.fail(ArgumentError, f"{name}: missing extra argument(s) "
                                         f"{', '.join(missing)} (pass them by keyword)")
        return apply(name, logic, bind(op_asn, extras), bind(grad_asn, extras), *xs)  # type: ignore[arg-type]

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"The custom {kind} operation {name!r}."
    return op


def unary_op(op_asn: Asn, grad_asn: Asn | None, *, logic: str = ".",
             name: str | None = None) -> Callable[..., Any]:
    """A differentiable unary operation from a pair of (@cd) assignment functions. Their
    parameters other than slot names (`v`, `v1`, `g`, `g1`, ..., `projections`) are extra
    arguments, passed by keyword: ``clamp = oc.unary_op(clamp_op, clamp_grad)``,
    ``clamp(x, lo=-1.0, hi=1.0)``."""
    validate.op_builder_args("unary_op", op_asn, grad_asn, logic, name)
    nm: str = name or str(getattr(op_asn, "__name__", "unary_op"))
    return operation("unary", 1, nm, logic_of_string(logic), op_asn, grad_asn)


def binary_op(op_asn: Asn, grad_asn: Asn | None, *, logic: str = ".",
              name: str | None = None) -> Callable[..., Any]:
    """A differentiable binary operation from a pair of (@cd) assignment functions (extra
    arguments as for `unary_op`)."""
    validate.op_builder_args("binary_op", op_asn, grad_asn, logic, name)
    nm: str = name or str(getattr(op_asn, "__name__", "binary_op"))
    return operation("binary", 2, nm, logic_of_string(logic), op_asn, grad_asn)
