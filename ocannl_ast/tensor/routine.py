"""Compiled routines: a `Routine` lowers its code through the context it was compiled in,
compiles it with the context's backend and runs it over the context's arrays, checking
first that what it reads has values; and its per-call fast path (`fast_caller`). Input:
Code and the context (`Host`). Output: a callable running the compiled code."""

from __future__ import annotations

import difflib
import functools
import keyword
import linecache
import operator
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from ..errors import ArgumentError, RuntimeDataError, user_span
from ..lowering.asgn_analysis import read_write_sets
from ..lowering.loop_ir import Buffer
from . import validate
from .node import Code, Tensor
from .pipeline import Lowered

if TYPE_CHECKING:
    from ..backends.protocol import Backend, CompiledRoutine

#: ``fast(*statics) -> bool``: ran the routine without checks (see `fast_caller`)
FastCall = Callable[..., bool]


class Host(Protocol):
    """What a routine uses of the context it was compiled in (`context.Context`)."""

    backend: Backend  #: compiles the loop program (`backends`)
    lock: threading.RLock  #: serializes routine calls with init, get and set
    available: set[int]  #: buffer ids that have values
    virtual: dict[int, str]  #: buffer id -> a routine that computes it inline
    #: the routine that may run again without checks (see `Routine`)
    fast: Routine | None

    @property
    def arrays_epoch(self) -> int: ...

    def lowered(self, code: Code, name: str, keep: frozenset[int] = ..., *,
                content_named: bool = ...) -> Lowered: ...

    def adopt(self, out: Lowered, routine: str) -> None: ...

    def array(self, buf: Buffer) -> np.ndarray: ...

    def ensure_initialized(self, tensors: Sequence[Tensor]) -> None: ...


class Routine:
    """A compiled routine: call it (with static arguments by name or position) to run.

    The first call checks that what it reads has values (initializing params first). A
    value another routine still reads is never virtualized away (`Context.compile` keeps
    it), so once a call ran, later calls skip that check; they re-bind the arrays only
    after the context replaced one (`Context.arrays_epoch`), and go the checked way again
    when another routine ran in between (to update what is available) or this one must be
    recompiled (`stale`). A call right after a checked run of the same routine
    (`Context.fast`) only stores its static ints and calls the compiled code.
    """

    def __init__(self, ctx: Host, code: Code, name: str,
                 held: frozenset[int] = frozenset(), *, content_named: bool = False) -> None:
        self.ctx = ctx
        self.code = code
        self.stem = name  #: the name given, or the stem of a content-derived one
        self.content_named = content_named
        self.name = name  #: the compiled program's name (`stem_<digest>` when content-named)
        self.held = held  #: buffer ids of the tensors the caller held when compiling
        self._build()

    def _build(self) -> None:
        """Lower and compile the code, keeping what the context must keep."""
        out = self.ctx.lowered(self.code, self.stem, self.held,
                               content_named=self.content_named)
        self.prog = out.prog
        self.name = out.prog.name
        self.compiled: CompiledRoutine = self.ctx.backend.compile(out.prog)
        compiled = self.compiled
        self.held_out = out.held_out
        self.ctx.adopt(out, self.name)
        reads, writes = read_write_sets(out.asgn)
        self.needs = frozenset(reads)
        self.virtual = frozenset(out.virtual)  #: buffers computed inline: no value after
        self.writes = frozenset(writes - out.virtual)
        self.stale = False
        self.static_names = [s.name for s in self.prog.static_args]
        self._names = tuple(self.static_names)
        getter = operator.itemgetter(*self._names) if self._names else lambda kw: ()
        self._by_name: Any = ((lambda kw: (getter(kw),)) if len(self._names) == 1 else getter)
        self._ready = False  # every input had a value at a call that ran (stays true)
        self.arrays: tuple[np.ndarray, ...] = ()
        self._fast: FastCall = _never  # see `fast_caller`
        self._arrays_epoch = -1  # the ctx.arrays_epoch `arrays` were taken at
        compiled.share_lock(self.ctx.lock)  # bound once (`_refresh`), then run
        self._run = compiled.run_bound
        if self.ctx.fast is self:
            self.ctx.fast = None
        self._refresh()
        self.__class__ = _call_class(self._names, self._value_entry() is not None)

    @property
    def stale(self) -> bool:
        """Recompile before the next run (something it virtualized must now be kept)."""
        return self._stale

    @stale.setter
    def stale(self, value: bool) -> None:
        self._stale = value
        if value and self.ctx.fast is self:
            self.ctx.fast = None

    def _refresh(self) -> None:
        """Take the context's current arrays and bind them (again if taking them replaced
        one, e.g. grew the arenas' scratch block after an earlier arena's view was taken)."""
        epoch = None
        while epoch != self.ctx.arrays_epoch:
            epoch = self.ctx.arrays_epoch
            self.arrays = tuple(self.ctx.array(b) for b in self.prog.buffers)
        self.compiled.bind(self.arrays)
        self._fast = fast_caller(self)
        c = self.compiled
        # (fn, table, statics, failed); statics None: fn takes the one static by value
        value = self._value_entry()
        call = (value[0], value[1], None, value[2]) if value else c.entry()
        self._direct: tuple[Any, ...] | None = None if c.bound is not self.arrays else (
            self.ctx.lock.acquire, self.ctx.lock.release, self.ctx, c, self.arrays, *call)
        self._arrays_epoch = self.ctx.arrays_epoch

    def _value_entry(self) -> tuple[Any, Any, Any] | None:
        """The backend's entry taking the one static int by value, where it has one."""
        get = getattr(self.compiled, "value_entry", None)  # (not in the protocol: optional)
        return get() if get is not None and len(self._names) == 1 else None

    def _statics(self, args: tuple[int, ...], kwargs: dict[str, int]) -> list[int]:
        vals = list(args)
        for s in self.prog.static_args[len(vals):]:
            if s.name not in kwargs and self.stem in ("eval", "value_and_grad"):
                validate.fail(ArgumentError, f"{self.stem} runs code reading the static index "
                              f"'{s.name}' (a batch_slice?), and it has no way to pass one: "
                              "compile the code and call it with the index, e.g. "
                              f"ctx.compile(t.forward)({s.name}=0)")
            if s.name not in kwargs:
                names = [x.name for x in self.prog.static_args]
                odd = sorted(k for k in kwargs if k not in names)
                near = difflib.get_close_matches(odd[0], [s.name], n=1) if odd else []
                validate.fail(ArgumentError, f"routine {self.prog.name} needs static argument "
                              f"'{s.name}'" + (f", got unknown keyword argument(s) {odd}"
                                               if odd else "")
                              + (f" (did you mean {s.name}={kwargs[odd[0]]!r}?)" if near else ""))
            vals.append(kwargs.pop(s.name))
        if kwargs or len(vals) != len(self.prog.static_args):
            validate.fail(ArgumentError, f"routine {self.prog.name} takes static arguments "
                                         f"{self.static_names}, got {len(args)} positional and "
                                         f"{sorted(kwargs) or 'no other'} keyword argument(s)")
        return [validate.check_static_value(self.prog.name, s.name, v)
                for s, v in zip(self.prog.static_args, vals, strict=True)]

    def __call__(self, *args: int, **kwargs: int) -> None:
        statics = _positional(self, args, kwargs)
        if statics is not None and self._fast_call(statics):
            return
        self._call(args, kwargs)

    def _fast_call(self, statics: tuple[int, ...]) -> bool:
        try:
            return self._fast(*statics)
        except OverflowError:  # a static beyond int64: nothing ran
            self._statics(statics, {})
            raise

    def _call(self, args: tuple[int, ...], kwargs: dict[str, int]) -> None:
        """The checked way (validates the statics and explains what is wrong)."""
        statics = self._named(args, kwargs) if kwargs else args
        with self.ctx.lock:
            self._checked_run(self._statics(statics, {}))

    def _named(self, args: tuple[int, ...], kwargs: dict[str, int]) -> tuple[Any, ...]:
        if not args and len(kwargs) == len(self._names):
            try:
                return self._by_name(kwargs)  # type: ignore[no-any-return]
            except KeyError:
                pass
        return tuple(self._statics(args, dict(kwargs)))

    def _checked_run(self, statics: Any) -> None:
        """A call before the inputs were known to have values, after arrays changed, after
        another routine ran, or when this one must be recompiled first."""
        if self.stale:
            self._build()
        if not self._ready:
            self.ctx.ensure_initialized(self.held_out)
            missing = self.needs - self.ctx.available
            if missing:
                names = ", ".join(f"'{b.name}'" for b in self.prog.buffers if b.id in missing)
                inline = sorted({self.ctx.virtual[b] for b in missing if b in self.ctx.virtual})
                why = (f"; routine(s) {', '.join(inline)} computed it inline (virtualized) "
                       "and now keep it: run them again first" if inline else "")
                if any(b.id in missing and b.name.endswith("_grad") for b in self.prog.buffers):
                    why += ("; a gradient is computed by oc.grad_update(loss): compile it first "
                            "in the same routine, ctx.compile([oc.grad_update(loss), "
                            "oc.sgd_update(loss, ...)]), or run a routine that has it before")
                raise RuntimeDataError(f"{names} has no value: set it with ctx.set(...) before "
                                       f"running code that reads it{why}", user_span())
        self._rebind_if_needed()
        self._run(statics)
        self._ran()
        self._ready = True
        self.ctx.fast = self

    def _rebind_if_needed(self) -> None:
        """Take the context's arrays again when it replaced one, or when a direct call of
        `compiled` bound other arrays."""
        if (self._arrays_epoch != self.ctx.arrays_epoch
                or self.compiled.bound is not self.arrays):
            self._refresh()

    def run_unchecked(self) -> None:
        with self.ctx.lock:
            if self.stale:
                self._build()
            self._rebind_if_needed()
            self._run(())
            self._ran()

    def _ran(self) -> None:
        """After a run: what it wrote is available, what it computed inline is not (an
        older value would be stale)."""
        self.ctx.available |= self.writes
        self.ctx.available -= self.virtual
        self.ctx.fast = None


# ---- the fast path ------------------------------------------------------------------------
#
# `fast_caller(routine)` builds ``fast(*statics) -> bool`` once per binding of the routine's
# arrays. It runs the routine and returns True when the call can skip every check: the
# routine is the context's `fast` one and its compiled code (every backend binds:
# `backends.protocol.CompiledRoutine`) is still bound to these arrays. Otherwise it returns
# False having run nothing, and the caller goes the checked way (which validates and
# explains). A static beyond int64 raises OverflowError before anything runs. Closure
# variables, not attributes: this is the hot path of a training loop, a few hundred
# nanoseconds.
#
# The caller checks that the statics are exactly the routine's, as Python ints. A routine
# whose statics have plain names is an instance of a subclass (`_call_class`) whose
# ``__call__`` takes them as keyword-only parameters: ``step(batch=i)`` then binds `batch`
# without building a dict of keywords, the commonest call of a training loop.

def _never(*statics: int) -> bool:
    return False


def fast_caller(routine: Routine) -> FastCall:
    """The fast path of `routine` over its current arrays (see the comment above)."""
    compiled = routine.compiled
    if compiled.bound is not routine.arrays:
        return _never
    ctx, arrays, n = routine.ctx, routine.arrays, len(routine.static_names)
    acquire, release = ctx.lock.acquire, ctx.lock.release
    fn, table, st, failed = compiled.entry()

    def fast(*statics: int) -> bool:
        acquire()  # (acquire/release: cheaper than `with` here; `try` costs nothing)
        try:
            if ctx.fast is not routine or compiled.bound is not arrays:
                return False
            if n == 1:  # the commonest routine: a training step over `batch`
                st[0] = statics[0]
            elif n:
                st[0:n] = statics
            code = fn(table, st)
        finally:
            release()
        if code:
            raise failed(code)
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


_NO: Any = object()  # a static not passed by name


@functools.cache
def _call_class(names: tuple[str, ...], by_value: bool = False) -> type[Routine]:
    """`Routine` with a ``__call__`` taking `names` as keyword-only parameters (see the
    comment above), or `Routine` itself where a name cannot be a Python parameter. With
    `by_value` (one name), the fast path passes it to the entry by value (`_value_entry`)."""
    if len(set(names)) != len(names) or any(
            not n.isidentifier() or keyword.iskeyword(n) or n.startswith("_r_") for n in names):
        return Routine
    n = len(names)
    ints = " and ".join(f"_r_type({v}) is _r_int" for v in names) or "True"
    pos = " and ".join([f"_r_len(_r_args) == {n}"]
                       + [f"{v} is _r_NO" for v in names]
                       + [f"_r_type(_r_args[{k}]) is _r_int" for k in range(n)])
    named = ", ".join(f"({v!r}, {v})" for v in names)
    stores = "\n".join(f"{' ' * 28}_r_st[{k}] = {v}" for k, v in enumerate(names)) or \
        f"{' ' * 28}pass"
    run = f"_r_fn(_r_tab, {names[0]})" if by_value else "_r_fn(_r_tab, _r_st)"
    if by_value:
        stores = f"{' ' * 28}pass"
    src = f"""\
def __call__(_r_self, *_r_args, {"".join(f"{v}=_r_NO, " for v in names)}**_r_kwargs):
    if not _r_kwargs:
        if not _r_args:
            if {ints}:
                _r_d = _r_self._direct
                if _r_d is not None:  # `fast_caller`'s fast path, inline
                    _r_acq, _r_rel, _r_ctx, _r_comp, _r_arr, _r_fn, _r_tab, _r_st, _r_fail = _r_d
                    _r_code = None
                    _r_acq()
                    try:
                        if _r_ctx.fast is _r_self and _r_comp.bound is _r_arr:
{stores}
                            _r_code = {run}
                    except _r_Overflow:  # a static beyond int64: nothing ran
                        _r_self._statics([{", ".join(names)}], {{}})
                        raise
                    finally:
                        _r_rel()
                    if _r_code is not None:
                        if _r_code:
                            raise _r_fail(_r_code)
                        return
        elif {pos}:
            if _r_self._fast_call(_r_args):
                return
    _r_kw = {{_r_k: _r_v for _r_k, _r_v in ({named}{"," if n == 1 else ""}) if _r_v is not _r_NO}}
    _r_kw.update(_r_kwargs)
    _r_self._call(_r_args, _r_kw)
"""
    scope: dict[str, Any] = {"_r_NO": _NO, "_r_type": type, "_r_int": int, "_r_len": len,
                             "_r_Overflow": OverflowError}
    # named inside this package, so that errors locate the user's call, not this code
    fname = f"{__file__}<call{names}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)  # for tracebacks
    exec(compile(src, fname, "exec"), scope)  # noqa: S102
    call = scope["__call__"]
    call.__qualname__ = "Routine.__call__"
    call.__doc__ = Routine.__call__.__doc__
    return type("Routine", (Routine,), {"__call__": call, "__slots__": (),
                                        "__module__": Routine.__module__})
