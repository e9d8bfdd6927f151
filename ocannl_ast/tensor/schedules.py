"""Step counters and learning-rate schedules computed inside the compiled routine.

A step counter is a context-held, non-differentiable one-cell node (zero until written,
kept and checkpointed with the context's other state, like Adam's moments). The optimizer
updates (`sgd_update`, `adam_update`) end with `counter += 1` for every counter found in
the loss's or the learning rate's graph, so a schedule (or a dropout mask) read during
update number k (1-based) sees the value k - 1.

A schedule is an ordinary tensor expression of its counter: `adam_update(loss,
learning_rate=oc.lr_cosine(0.01, 1000))` computes the rate in the routine from the step.
Counters are float cells stored in the routine's compute precision (float32 in a 16-bit
context, where a 16-bit cell would stop counting at 256 or 2048): exact up to 2**24 steps.

A user's own optimizer (a @cd function reading a schedule) gets the same behaviour: a
routine whose code updates a parameter and reads step counters it never increments is
compiled with `counter += 1` appended for each of them (`pending_advances`), so a schedule
advances once per run of that routine. `advance_steps(lr, loss)` gives the increments
explicitly (a routine that writes a counter itself is left as written).

Input: numbers. Output: one-cell Tensors (the schedules), Code (the counter increments).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Iterable
from typing import Any

from ..errors import ArgumentError
from ..rewrite import make_decorator
from . import validate
from .leaves import node, number
from .node import AccumItem, Code, Init, NodeKind, Tensor, concat
from .ops import add, cos, mul, relu, sub

cd = make_decorator("cd", "ocannl_ast.tensor.dsl")

#: every step counter alive, by tensor id (the optimizers find them in a graph)
_COUNTERS: weakref.WeakValueDictionary[int, Tensor] = weakref.WeakValueDictionary()


def step_counter(label: str = "step") -> Tensor:
    """A new context-held step counter (a one-cell node, 0 until the first update).

    Example: ``t = oc.step_counter(); lr = 0.1 / (1.0 + t)`` is a 1/t decay: the optimizer
    that uses ``lr`` (or whose loss reads ``t``) increments ``t`` after each update."""
    validate.check_str("step_counter", "label", label)
    t = node(label, output_dims=[1], precision="compute")  # exact past 2**8 steps in bfloat16
    _COUNTERS[t.id] = t
    return t


def counters_of(*tensors: Any) -> list[Tensor]:
    """The step counters that the graphs of `tensors` read (non-tensors are skipped), in
    a stable order."""
    seen: dict[int, Tensor] = {}
    for root in tensors:
        if isinstance(root, Tensor):
            for t in root.subgraph():
                if t.id in _COUNTERS:
                    seen[t.id] = t
    return [seen[k] for k in sorted(seen)]


def rate_code(learning_rate: Any) -> Code:
    """A tensor learning rate's whole forward code (recomputed by every routine that
    updates with it, so a second routine never reads a stale rate); none for a number."""
    return learning_rate.forward_all() if isinstance(learning_rate, Tensor) else Code()


@cd
def advance_one(counter):
    """`counter += 1`."""
    counter += 1.0


def advance(counters: Iterable[Tensor]) -> Code:
    """The code that increments each counter once."""
    return concat(advance_one(c) for c in counters)


def advance_steps(*tensors: Any) -> Code:
    """The code incrementing, once, every step counter that the graphs of `tensors` read
    (a schedule such as `oc.lr_cosine`, a loss with dropout). End a custom optimizer's
    code with it: ``ctx.compile([oc.grad_update(loss), my_opt(ps, lr),
    oc.advance_steps(lr, loss)])``. Without it, compiling a routine that updates a
    parameter appends the same increments (see `pending_advances`)."""
    return advance(counters_of(*tensors))


def pending_advances(code: Code) -> Code:
    """For a routine's code: when it writes a parameter's value (an optimizer step), the
    increments of the step counters it reads but never writes; otherwise no code. Reading
    a schedule in an update thus advances it once per run of the routine, as
    `oc.sgd_update` / `oc.adam_update` do."""
    updates = False
    read: dict[int, Tensor] = {}
    written: set[int] = set()
    for it in code:
        if not isinstance(it, AccumItem):
            continue
        lhs = it.lhs.tensor
        if it.lhs.kind is NodeKind.VALUE and lhs.init is Init.PARAM:
            updates = True
        if lhs.id in _COUNTERS:
            written.add(lhs.id)
        for r in it.rhs:
            if r.tensor.id in _COUNTERS:
                read[r.tensor.id] = r.tensor
    if not updates:
        return Code()
    return advance(read[k] for k in sorted(read) if k not in written)


def lr_constant(lr: float) -> Tensor:
    """The constant rate `lr` as a tensor (no counter: it does not change)."""
    _check_rate("lr_constant", "lr", lr)
    return number(float(lr))


def lr_warmup(lr: float, warmup_steps: int) -> Tensor:
    """Linear warmup: update k (1-based) uses `lr * min(1, k / warmup_steps)`, so the rate
    reaches `lr` at update `warmup_steps` and stays there."""
    _check_rate("lr_warmup", "lr", lr)
    _check_steps("lr_warmup", "warmup_steps", warmup_steps, allow_zero=False)
    t = step_counter("lr_step")
    return mul(float(lr), _warm(t, warmup_steps))


def lr_cosine(lr: float, total_steps: int, warmup_steps: int = 0,
              min_lr: float = 0.0) -> Tensor:
    """Cosine decay with optional linear warmup: update k (1-based, step t = k - 1) uses
    `lr * k / warmup_steps` while k < warmup_steps, then
    `min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2` with
    `p = clip((t - warmup_steps) / (total_steps - warmup_steps), 0, 1)`: `lr` at the end of
    the warmup, `min_lr` from update `total_steps + 1` on."""
    _check_rate("lr_cosine", "lr", lr)
    _check_rate("lr_cosine", "min_lr", min_lr)
    _check_steps("lr_cosine", "total_steps", total_steps, allow_zero=False)
    _check_steps("lr_cosine", "warmup_steps", warmup_steps, allow_zero=True)
    if warmup_steps >= total_steps:
        validate.fail(ArgumentError, f"lr_cosine: warmup_steps ({warmup_steps}) must be "
                                     f"less than total_steps ({total_steps})")
    t = step_counter("lr_step")
    p = _clip01(mul(sub(t, float(warmup_steps)), 1.0 / (total_steps - warmup_steps)))
    decayed = add(float(min_lr), mul(0.5 * (lr - min_lr), add(1.0, cos(mul(math.pi, p)))))
    if warmup_steps == 0:
        return decayed
    return mul(decayed, _warm(t, warmup_steps))


def _warm(t: Tensor, warmup_steps: int) -> Tensor:
    """`min(1, (t + 1) / warmup_steps)`."""
    return sub(1.0, relu(sub(1.0, mul(add(t, 1.0), 1.0 / warmup_steps))))


def _clip01(x: Tensor) -> Tensor:
    """`x` clipped to [0, 1]."""
    return sub(relu(x), relu(sub(x, 1.0)))


def _check_rate(fn: str, name: str, v: Any) -> None:
    validate.check_arg_number(fn, name, v)
    if not math.isfinite(v) or v < 0:
        validate.fail(ArgumentError, f"{fn}: {name} must be a finite number >= 0, got {v!r}")


def _check_steps(fn: str, name: str, v: Any, *, allow_zero: bool) -> None:
    if not validate.is_int(v) or v < 0 or (v == 0 and not allow_zero):
        need = "an int >= 0" if allow_zero else "a positive int"
        validate.fail(ArgumentError, f"{fn}: {name} must be {need}, got "
                                     f"{validate.describe(v)}")
