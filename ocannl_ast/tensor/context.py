"""Contexts and routines: compile Code (through `tensor.pipeline`) into one backend routine,
hold the arrays, initialize params once per context, refuse reads of unset tensors; a
re-entrant lock per context, the pipeline's lock for shape closing. Input: Code (forward,
backprop, updates, @cd results). Output: callable Routines; host data as NumPy arrays."""

from __future__ import annotations

import itertools
import operator
import os
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, BackendError, RuntimeDataError, user_span
from ..infer.padding import Margins
from ..lowering import assignments as A
from ..lowering.asgn_analysis import read_write_sets
from ..lowering.loop_ir import Buffer, LoopProgram, Precision, cell_elems
from ..lowering.threefry import threefry4x32
from . import checkpoint, pipeline, validate
from .escape import user_held
from .fastcall import FastCall, fast_caller
from .node import (
    Code,
    FetchItem,
    Init,
    NodeKind,
    NodeRef,
    OpRecord,
    Tensor,
    buffer_id,
    concat,
    node_owner,
)
from .pipeline import held_out, init_deps
from .random_init import random_init

_routine_ids = itertools.count(1)
_seed = [0]
_defaults_lock = threading.Lock()
_defaults: dict[tuple[str, str], Context] = {}


def set_seed(seed: int) -> None:
    """The global seed keying every parameter's random initialization."""
    validate.check_seed(seed)
    _seed[0] = int(seed) & 0xFFFFFFFF


def param_key(tensor_id: int, seed: int | None = None) -> tuple[int, int, int, int]:
    """threefry4x32 of the tensor's identity under the global seed (seed 001)."""
    s = _seed[0] if seed is None else seed
    w = threefry4x32((s, 0x0CA11, 0, 0), np.array([[tensor_id, 0, 0, 0]], dtype=np.uint32))
    return tuple(int(x) for x in w[0])  # type: ignore[return-value]


def as_code(code: Any) -> Code:
    """Code from Code, a Tensor (its forward code) or a sequence of those."""
    if isinstance(code, Code):
        return code
    if isinstance(code, Tensor):
        return code.forward
    if isinstance(code, list | tuple):
        return concat(as_code(c) for c in code)
    validate.fail(ArgumentError, f"cannot compile {validate.describe(code)}: expected code "
                  "(tensor.forward, oc.grad_update(...), a @cd function's result) or a sequence")


def _ref_of(x: Tensor | NodeRef) -> NodeRef:
    return x if isinstance(x, NodeRef) else NodeRef(x, NodeKind.VALUE)


class Context:
    """Arrays of one backend, parameters initialized once each, routines compiled here.

    Example: ``ctx = oc.Context(); r = ctx.compile(y.forward); r(); ctx.get(y)``.
    """

    def __init__(self, backend: str = "c", *, precision: str = "float32") -> None:
        self.backend = validate.backend(backend, precision)
        try:
            self.backend.ensure_runtime()  # e.g. cuda: cuda-python, NVRTC, a GPU
        except BackendError as e:
            raise e.with_span(user_span()) from None
        self.precision = Precision(precision)
        self.dtype = np.float32 if self.precision == Precision.FLOAT32 else np.float64
        self.arrays: dict[int, np.ndarray] = {}
        self.available: set[int] = set()
        self.initialized: set[int] = set()
        self.lock = threading.RLock()  #: serializes init, routine calls, get/set/eval
        self._arrays_epoch = 0
        self._evals: dict[int, Routine | None] = {}  #: tensor id -> its eval routine
        #: what `save`/`load` checkpoint: params and persistent nodes of routines compiled here
        self.holdings: dict[int, Tensor] = {}
        #: buffer id -> name of a routine that computes it inline (virtualized, no buffer)
        self.virtual: dict[int, str] = {}
        self.escaping: set[int] = set()  #: buffer ids to keep materialized in new routines
        self.folded: dict[int, str] = {}  #: constant buffer id -> a routine that folded it
        self.user_set: set[int] = set()  #: buffer ids set by ctx.set (never folded)
        self.routines: list[Routine] = []  #: the routines compiled here (for recompiling)
        #: buffer id -> padding margins of every buffer laid out here (() unpadded): the
        #: pipeline decides them at a buffer's first compilation, they stay fixed after
        self.layout: dict[int, Margins] = {}
        #: the projections the pipeline derived for routines compiled here (reused)
        self.projections: dict[OpRecord, A.Projections] = {}
        #: the routine that may run again without checks: it ran last, through its checked
        #: path, and since then no array was replaced and it did not go stale
        self.fast: Routine | None = None

    @property
    def arrays_epoch(self) -> int:
        """Bumped whenever an array object of `arrays` is replaced: routines re-bind theirs."""
        return self._arrays_epoch

    @arrays_epoch.setter
    def arrays_epoch(self, value: int) -> None:
        self._arrays_epoch = value
        self.fast = None

    # ---- host data ---------------------------------------------------------------------

    def array(self, buf: Buffer) -> np.ndarray:
        """The host array of a buffer (margins included). A buffer set or read before its
        padding margins were frozen is re-laid out, keeping its logical values."""
        with self.lock:
            arr = self.arrays.get(buf.id)
            if arr is not None and arr.shape != buf.dims and not buf.uint4x32:
                new = np.zeros(buf.dims, dtype=self.dtype)
                new[self._interior(buf.id, buf.dims)] = arr
                arr = self.arrays[buf.id] = new
                self.arrays_epoch += 1
            if arr is None:
                # uint4x32 cells are 16 bytes: vec_length numbers of the precision each
                shape = ((cell_elems(buf, self.precision),) if buf.uint4x32 else buf.dims)
                arr = np.zeros(shape, dtype=self.dtype)
                self.arrays[buf.id] = arr
            return arr

    def get(self, x: Tensor | NodeRef) -> np.ndarray:
        """A copy of a tensor's value (or `t.grad`), axes batch, output, input."""
        validate.check_tensor("Context.get", "tensor", x, refs=True)
        ref = _ref_of(x)
        with self.lock:
            pipeline.close_tensors([ref.tensor])
            buf = ref.buffer(self.layout)
            if buf.id not in self.available and buf.id in self.virtual:
                self.materialize(buf.id)
                raise RuntimeDataError(
                    f"'{ref.tensor.label}' ({ref.kind}) was computed inline by routine "
                    f"'{self.virtual[buf.id]}' (virtualized: it has no buffer there); it is "
                    "kept from that routine's next run on. To read it from the first run, "
                    "compile with keep=[...] or set OCANNL_AST_VIRTUALIZE=0", user_span())
            if buf.id not in self.available:
                raise RuntimeDataError(f"'{ref.tensor.label}' ({ref.kind}) has no value in "
                                       "this context: nothing set or computed it yet", user_span())
            arr = self.array(buf)
            self.backend.to_host(arr)  # the device's copy, where routines wrote one
            return arr[self._interior(buf.id, buf.dims)].copy()

    def set(self, x: Tensor | NodeRef, values: Any) -> None:
        """Set a tensor's value from host data of its exact dims."""
        validate.set_args(x, values)
        ref = _ref_of(x)
        with self.lock:
            pipeline.close_tensors([ref.tensor])
            buf = ref.buffer(self.layout)
            dims = ref.tensor.dims()
            arr = np.asarray(values, dtype=self.dtype)
            if arr.shape != dims and arr.size == int(np.prod(dims)) and arr.ndim <= 1:
                arr = arr.reshape(dims)
            if arr.shape != dims:
                raise RuntimeDataError(f"'{ref.tensor.label}' has dims {dims}, got data "
                                       f"of shape {arr.shape}", user_span())
            if buf.id in self.folded:
                raise RuntimeDataError(f"'{ref.tensor.label}' is a constant folded into "
                                       f"routine '{self.folded[buf.id]}': make it a param or "
                                       "oc.term to set it", user_span())
            self.user_set.add(buf.id)
            self.array(buf)[self._interior(buf.id, buf.dims)] = arr
            self.backend.host_written(self.array(buf))
            self.available.add(buf.id)
            if ref.kind is NodeKind.VALUE:
                self.initialized.add(ref.tensor.id)

    def eval(self, tensor: Tensor) -> np.ndarray:
        """Run the tensor's forward code here, with this context's current params (first
        initializing only those not yet initialized), and return its value."""
        with self.lock:
            if tensor.id not in self._evals:
                code = tensor.forward_all()
                self._evals[tensor.id] = (self.compile(code, name=f"eval_{tensor.id}",
                                                       keep=[tensor])
                                          if code.items else None)
            routine = self._evals[tensor.id]
            if routine is not None:
                routine()
            else:
                self.holdings.update((t.id, t) for t in checkpoint.held([tensor]))
                self.ensure_initialized([tensor])
            return self.get(tensor)

    # ---- compiling -----------------------------------------------------------------------

    def compile(self, code: Any, *, name: str | None = None,
                keep: Sequence[Tensor | NodeRef] = ()) -> Routine:
        """One backend routine for the whole code sequence. Intermediates it reads once
        are computed inline (virtualized) unless the caller holds them (`tensor.escape`),
        they are in `keep` (values, or `t.grad`), another routine of this context reads
        them, or `get` read them here."""
        validate.check_str("Context.compile", "name", name, optional=True)
        for k in keep:
            validate.check_tensor("Context.compile", "keep", k, refs=True)
        with self.lock:
            code = as_code(code)
            self.escaping.update(_buffer_id(_ref_of(k)) for k in keep)
            held = frozenset(user_held())
            routine = Routine(self, code, name or f"routine_{next(_routine_ids)}", held)
            self.escaping.update(routine.needs)
            for r in self.routines:
                if routine.needs & r.virtual:
                    r.stale = True  # recompiled, keeping what this routine reads
            self.routines.append(routine)
            self.holdings.update((t.id, t) for t in checkpoint.held(routine.held_out))
            return routine

    # ---- checkpoints -------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Checkpoint every param and optimizer-state node this context holds (those of
        the routines compiled in it) to a safetensors file keyed by `tensor.name`; the
        write is atomic. Example: ``ctx.save("model.safetensors")``."""
        checkpoint.save(self, path)

    def load(self, path: str | os.PathLike[str]) -> None:
        """Set every held param and node from a checkpoint (strict: a missing, extra,
        mis-shaped or wrong-dtype entry is an `oc.CheckpointError` naming it, and nothing
        changes). Compile the routines first; loaded tensors are not re-initialized."""
        checkpoint.load(self, path)

    def lower_code(self, code: Any, *, name: str | None = None
                   ) -> tuple[LoopProgram, A.Asgn, list[Tensor]]:
        """Run the compile pipeline (`tensor.pipeline`): close shapes, derive projections,
        build and simplify the assignments, lower to loop IR, virtualize, bind statics."""
        out = self.lowered(as_code(code), name or f"routine_{next(_routine_ids)}")
        return out.prog, out.asgn, out.held_out

    def lowered(self, code: Code, name: str, keep: frozenset[int] = frozenset()
                ) -> pipeline.Lowered:
        """The pipeline's output for `code`, keeping what this context must keep and the
        buffers in `keep`."""
        opts = pipeline.Options(name, self.precision, keep=frozenset(self.escaping) | keep,
                                no_fold=frozenset(self.user_set),
                                fusion_limit=self.backend.fusion_limit,
                                layout=self.layout, projections=self.projections)
        return pipeline.run(code, opts)

    def materialize(self, buf_id: int) -> None:
        """Keep a buffer from now on: the routines that virtualized it are recompiled."""
        self.escaping.add(buf_id)
        for r in self.routines:
            if buf_id in r.virtual:
                r.stale = True

    def _interior(self, buf_id: int, dims: tuple[int, ...]) -> tuple[slice, ...]:
        """The logical (unpadded) part of a buffer of these dims: users see unpadded values."""
        m = self.layout.get(buf_id)
        if not m or len(m) != len(dims):
            return tuple(slice(None) for _ in dims)
        return tuple(slice(lo, d - hi) for d, (lo, hi) in zip(dims, m, strict=True))

    def ensure_initialized(self, tensors: Sequence[Tensor]) -> None:
        """Initialize the held-out tensors not yet initialized in this context, after
        whatever their initializers read (a param initialized from another param or from
        constant data). Terms (data the caller sets) are left to the routine's read check."""
        with self.lock:
            todo = self._init_order(tensors)
            if not todo:
                return
            words: list[tuple[Tensor, tuple[int, int, int, int]]] = []
            code = concat(self._init_one(t, words) for t in todo)
            for w, value in words:  # word constants, embedded exactly (seed 001)
                self.array(w.buffer(layout=self.layout)).view(np.uint32)[:4] = value
                self.backend.host_written(self.array(w.buffer(layout=self.layout)))
            if code.items:
                self.compile(code, name=f"init_{next(_routine_ids)}").run_unchecked()
            for t in todo:
                self.initialized.add(t.id)
                self.available.add(buffer_id(t))

    def _init_order(self, tensors: Sequence[Tensor]) -> list[Tensor]:
        """The tensors to initialize, each after the held-out tensors its init reads."""
        order: dict[int, Tensor] = {}

        def visit(t: Tensor, reader: Tensor | None) -> None:
            if t.id in self.initialized or t.id in order:
                return
            if _is_term(t):
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

    def _init_one(self, t: Tensor,
                  words: list[tuple[Tensor, tuple[int, int, int, int]]] | None = None) -> Code:
        """The init code of one tensor; word constants it needs set are added to `words`."""
        buf = NodeRef(t, NodeKind.VALUE)
        v = t.init_value
        if t.init is Init.NODE:
            return Code((FetchItem(buf, A.ConstantFill(0.0)),))
        if isinstance(v, Tensor):
            return t.init_code
        if isinstance(v, int | float):
            return Code((FetchItem(buf, A.ConstantFill(float(v))),))
        if isinstance(v, np.ndarray):
            pipeline.close_tensors([t])
            self.set(t, v.reshape(t.dims()) if v.size == int(np.prod(t.dims())) else v)
            return Code()
        if v is None and t.init is Init.PARAM:
            pipeline.close_tensors([t])
            init = random_init(t, _seed[0], self.precision)
            if words is not None:
                words.extend(init.words)
            return init.code
        raise RuntimeDataError(f"'{t.label}' has no value: set it with ctx.set(...) before "
                               "running code that reads it")


def _buffer_id(ref: NodeRef) -> int:
    """The id of a reference's buffer, without closing its shape (as `Tensor.buffer`)."""
    t, kind = node_owner(ref.tensor, ref.kind)
    if kind is NodeKind.GRAD and not t.diff:
        validate.fail(ArgumentError, f"tensor '{t.label}' is not differentiable: it has no "
                                     "grad to keep")
    return buffer_id(t, kind)


def default_context(backend: str = "c", *, precision: str = "float32") -> Context:
    """The process-wide context of a backend (and precision) that `oc.eval` and
    `oc.value_and_grad` use when given no `ctx`: params keep their values across calls."""
    validate.backend(backend, precision)
    key = (backend, Precision(precision).value)
    with _defaults_lock:
        ctx = _defaults.get(key)
        if ctx is None:
            ctx = _defaults[key] = Context(backend, precision=precision)
        return ctx


def _is_term(t: Tensor) -> bool:
    """Data the caller sets (`oc.term`): held out with nothing to initialize it from."""
    return t.init is Init.CONST and t.init_value is None and t.alias_of is None


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

    def __init__(self, ctx: Context, code: Code, name: str,
                 held: frozenset[int] = frozenset()) -> None:
        self.ctx = ctx
        self.code = code
        self.name = name
        self.held = held  #: buffer ids of the tensors the caller held when compiling
        self._build()

    def _build(self) -> None:
        """Lower and compile the code, keeping what the context must keep."""
        out = self.ctx.lowered(self.code, self.name, self.held)
        self.prog = out.prog
        self.compiled = compiled = self.ctx.backend.compile(out.prog)
        self.held_out = out.held_out
        self.ctx.layout.update(out.layout)  # the buffers are allocated: their layout is fixed
        self.ctx.projections.update(out.projections)
        reads, writes = read_write_sets(out.asgn)
        self.needs = frozenset(reads)
        self.virtual = frozenset(out.virtual)  #: buffers computed inline: no value after
        self.writes = frozenset(writes - out.virtual)
        self.stale = False
        for b in out.virtual:
            self.ctx.virtual[b] = self.name
        for b in out.folded:
            self.ctx.folded[b] = self.name
        self.static_names = [s.name for s in self.prog.static_args]
        self._names = tuple(self.static_names)
        getter = operator.itemgetter(*self._names) if self._names else lambda kw: ()
        self._by_name: Any = ((lambda kw: (getter(kw),)) if len(self._names) == 1 else getter)
        self._ready = False  # every input had a value at a call that ran (stays true)
        self.arrays: tuple[np.ndarray, ...] = ()
        self._fast: FastCall = lambda args, kwargs: False  # see `fastcall`
        self._arrays_epoch = -1  # the ctx.arrays_epoch `arrays` were taken at
        self._bind = getattr(compiled, "bind", None)  # the C backend binds once, then runs
        if self._bind is not None:
            compiled.share_lock(self.ctx.lock)
            self._run = compiled.run_bound
        else:
            self._run = lambda statics: compiled(self.arrays, statics)
        if self.ctx.fast is self:
            self.ctx.fast = None
        self._refresh()

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
        """Take the context's current arrays (and bind them, on a backend that binds)."""
        self.arrays = tuple(self.ctx.array(b) for b in self.prog.buffers)
        if self._bind is not None:
            self._bind(self.arrays)
        self._fast = fast_caller(self)
        self._arrays_epoch = self.ctx.arrays_epoch

    def _statics(self, args: tuple[int, ...], kwargs: dict[str, int]) -> list[int]:
        vals = list(args)
        for s in self.prog.static_args[len(vals):]:
            if s.name not in kwargs:
                validate.fail(ArgumentError, f"routine {self.prog.name} needs static argument "
                                             f"'{s.name}'")
            vals.append(kwargs.pop(s.name))
        if kwargs or len(vals) != len(self.prog.static_args):
            validate.fail(ArgumentError, f"routine {self.prog.name} takes static arguments "
                                         f"{self.static_names}, got {len(args)} positional and "
                                         f"{sorted(kwargs) or 'no other'} keyword argument(s)")
        return [validate.check_static_value(self.prog.name, s.name, v)
                for s, v in zip(self.prog.static_args, vals, strict=True)]

    def __call__(self, *args: int, **kwargs: int) -> None:
        try:
            if self._fast(args, kwargs):
                return
        except OverflowError:  # a static beyond int64: nothing ran
            self._statics(args, dict(kwargs))
            raise
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
                or getattr(self.compiled, "bound", self.arrays) is not self.arrays):
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
