"""The per-call fast path of a compiled routine (`Context.fast`): a call right after a
checked run of the same routine only stores its static ints and calls the compiled code.

`fast_caller(routine)` builds ``fast(args, kwargs) -> bool`` once per binding of the
routine's arrays. It runs the routine and returns True when the call can skip every check:
the static arguments are exactly the routine's, as Python ints (positional, or all by name),
the routine is the context's `fast` one, and on a binding backend (C) its compiled code is
still bound to these arrays. Otherwise it returns False having run nothing, and the caller
goes the checked way (which validates and explains). A static beyond int64 raises
OverflowError before anything runs. Closure variables, not attributes: this is the hot path
of a training loop, a few hundred nanoseconds.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import Routine

FastCall = Callable[[tuple[Any, ...], dict[str, Any]], bool]


def fast_caller(routine: Routine) -> FastCall:
    """The fast path of `routine` over its current arrays (see the module docstring)."""
    compiled = routine.compiled
    if getattr(compiled, "bound", None) is not routine.arrays:
        return _unbound_caller(routine)
    if len(routine.static_names) == 1:
        return _one_static_caller(routine)
    ctx, lock, arrays, n = routine.ctx, routine.ctx.lock, routine.arrays, len(routine.static_names)
    fn, table, st, failed = compiled.entry()

    def fast(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        statics = _positional(routine, args, kwargs)
        if statics is None:
            return False
        with lock:
            if ctx.fast is not routine or compiled.bound is not arrays:
                return False
            if n:
                st[0:n] = statics
            code = fn(table, st)
            if code:
                raise failed(code)
        return True

    return fast


def _one_static_caller(routine: Routine) -> FastCall:
    """The commonest routine (a training step over `batch`), most directly."""
    ctx, lock, arrays, name0 = routine.ctx, routine.ctx.lock, routine.arrays, routine.static_names[0]
    compiled = routine.compiled
    fn, table, st, failed = compiled.entry()

    def fast(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        if kwargs:
            if args or len(kwargs) != 1 or name0 not in kwargs:
                return False
            v = kwargs[name0]
        elif len(args) == 1:
            v = args[0]
        else:
            return False
        if type(v) is not int:
            return False
        with lock:
            if ctx.fast is not routine or compiled.bound is not arrays:
                return False
            st[0] = v
            code = fn(table, st)
            if code:
                raise failed(code)
        return True

    return fast


def _unbound_caller(routine: Routine) -> FastCall:
    """A backend that does not bind arrays (CUDA): its compiled call checks them itself."""
    ctx, lock, compiled, arrays = routine.ctx, routine.ctx.lock, routine.compiled, routine.arrays

    def fast(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
        statics = _positional(routine, args, kwargs)
        if statics is None:
            return False
        with lock:
            if ctx.fast is not routine:
                return False
            compiled(arrays, statics)
        return True

    return fast


def _positional(routine: Routine, args: tuple[Any, ...], kwargs: dict[str, Any]
                ) -> tuple[Any, ...] | None:
    """The statics in the routine's order when they are exactly its statics as ints."""
    names = routine.static_names
    statics = args
    if kwargs:
        if args or len(kwargs) != len(names) or any(k not in kwargs for k in names):
            return None
        statics = tuple(kwargs[k] for k in names)
    if len(statics) != len(names) or any(type(v) is not int for v in statics):
        return None
    return statics
