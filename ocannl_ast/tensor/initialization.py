"""Initialization of held-out tensors (params, constants, persistent nodes), once per
context: in which order (each after the held-out tensors its initializer reads) and with
what (init code to compile, host data to set, threefry words to embed). Pure: the context
applies the plan. Input: tensors and the ids a context initialized. Output: an `InitPlan`."""

from __future__ import annotations

from collections.abc import Container, Sequence

import numpy as np

from ..errors import RuntimeDataError, user_span
from ..lowering import assignments as A
from ..lowering.loop_ir import Precision
from ..records import record
from .init_strategies import InitStrategy
from .node import Code, FetchItem, Init, NodeKind, NodeRef, Tensor, concat
from .pipeline import close_tensors, held_out, init_deps
from .random_init import RandomInit, random_init
from .seed import current_seed

Words = tuple[int, int, int, int]


@record
class InitPlan:
    """How to initialize some tensors: set `data` first, then `words`, then run `code`."""

    code: Code  #: init code, compiled into one routine
    data: tuple[tuple[Tensor, np.ndarray], ...]  #: host values to set (`oc.ndarray` inits)
    words: tuple[tuple[Tensor, Words], ...]  #: word constants, embedded exactly (seed 001)


def is_term(t: Tensor) -> bool:
    """Data the caller sets (`oc.term`): held out with nothing to initialize it from."""
    return t.init is Init.CONST and t.init_value is None and t.alias_of is None


def init_order(tensors: Sequence[Tensor], initialized: Container[int]) -> list[Tensor]:
    """The tensors to initialize (those not in `initialized`), each after the held-out
    tensors its init reads. Terms are left out; a tensor initialized from a term that has no
    value is an error."""
    order: dict[int, Tensor] = {}

    def visit(t: Tensor, reader: Tensor | None) -> None:
        if t.id in initialized or t.id in order:
            return
        if is_term(t):
            if reader is not None:
                raise RuntimeDataError(
                    f"'{reader.label}' is initialized from '{t.label}', which has no "
                    "value in this context: set it with ctx.set(...) first")
            return
        for d in held_out(init_deps(t, transitive=False)):
            visit(d, t)
        order[t.id] = t

    for t in tensors:
        visit(t, None)
    return list(order.values())


def init_plan(todo: Sequence[Tensor], precision: Precision) -> InitPlan:
    """The initialization of these tensors (in this order) under the current seed."""
    codes: list[Code] = []
    data: list[tuple[Tensor, np.ndarray]] = []
    words: list[tuple[Tensor, Words]] = []
    for t in todo:
        buf = NodeRef(t, NodeKind.VALUE)
        v = t.init_value
        if t.init is Init.NODE:
            codes.append(Code((FetchItem(buf, A.ConstantFill(0.0)),)))
        elif isinstance(v, Tensor):
            codes.append(t.init_code)
        elif isinstance(v, int | float):
            codes.append(Code((FetchItem(buf, A.ConstantFill(float(v))),)))
        elif isinstance(v, np.ndarray):
            close_tensors([t])
            data.append((t, _init_data(t, v)))
        elif (v is None or isinstance(v, InitStrategy)) and t.init is Init.PARAM:
            close_tensors([t])
            init = _strategy_init(t, v, precision)
            words.extend(init.words)
            codes.append(init.code)
        else:
            raise RuntimeDataError(f"'{t.label}' has no value: set it with ctx.set(...) "
                                   "before running code that reads it")
    return InitPlan(concat(codes), tuple(data), tuple(words))


def _strategy_init(t: Tensor, strategy: InitStrategy | None, precision: Precision
                   ) -> RandomInit:
    """The random init of param `t`: U[-1, 1) without a strategy, else the strategy's
    distribution resolved against `t`'s (closed) dims."""
    if strategy is None:
        return random_init(t, current_seed(), precision)
    d = strategy.resolve(t)
    if d.normal:
        return random_init(t, current_seed(), precision, normal=(d.mean, d.std))
    return random_init(t, current_seed(), precision, d.low, d.high)


def _init_data(t: Tensor, v: np.ndarray) -> np.ndarray:
    """An init array for `t`'s dims: the same shape, flat data of as many cells, or the
    same shape up to size-1 axes; anything else (a weight given the NumPy `x @ W` way
    round) is a RuntimeDataError at the tensor's line, never a silent reshape."""
    dims = t.dims()
    if v.shape == dims or v.size != int(np.prod(dims)):
        return v  # a different number of cells: `Context.set` says so
    if v.ndim <= 1 or [n for n in v.shape if n != 1] == [n for n in dims if n != 1]:
        return v.reshape(dims)
    hint = (": transposed? A weight's dims are its output dims, then its input dims"
            if sorted(v.shape) == sorted(dims) else "")
    raise RuntimeDataError(f"'{t.label}' has dims {dims} (batch, output, then input axes), "
                           f"got init data of shape {v.shape}{hint}",
                           getattr(t.shape, "span", None) or user_span())
