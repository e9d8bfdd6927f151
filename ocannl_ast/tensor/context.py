"""Contexts: the arrays of one backend (padded buffers seen unpadded through get/set), the
bookkeeping of the routines compiled here (what to keep materialized, what is virtualized
or folded, the buffers' layout), params initialized once each, checkpoints of its state
(`tensor.holdings`), tensor names unique within it. A context the user's code creates
starts a naming epoch (`ocannl_ast.naming`): a model built again after it gets the same
names. A re-entrant
lock per context; the pipeline's lock for shape closing. Input: Code (forward, backprop,
updates, @cd results) and host data. Output: Routines (`routine`); NumPy arrays."""

from __future__ import annotations

import os
import sys
import warnings
import weakref
from _thread import RLock, allocate_lock  # threading's locks, without its import
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import naming
from ..errors import ArgumentError, BackendError, CheckpointError, RuntimeDataError, user_span
from ..infer.padding import Margins
from ..lowering import assignments as A
from ..lowering.loop_ir import Buffer, LoopProgram, Precision, cell_elems, storage
from . import half, id_checks, precisions, schedules, validate, views
from .escape import user_held
from .node import Code, Init, NodeKind, NodeRef, OpRecord, Tensor, buffer_id, concat, node_owner

if TYPE_CHECKING:  # the compile-time modules load at a context's first use of them
    from ..lowering.asgn_analysis import Lifetimes
    from . import checkpoint, pipeline
    from .memory import MemoryReport
    from .routine import Routine

_defaults_lock = allocate_lock()
_defaults: dict[tuple[str, str], Context] = {}
#: every live context, for `warn_if_trained_elsewhere` (weak: a context's life is its user's)
_live: weakref.WeakSet[Context] = weakref.WeakSet()
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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
        if not os.path.abspath(sys._getframe(1).f_code.co_filename).startswith(_PACKAGE):
            naming.new_epoch()  # created by the user's code (not a default context)
        self.precision = Precision(precision)
        #: what `get` returns (float32 for bfloat16); `storage_dtype`: the arrays' (`half`)
        self.dtype = half.VALUE_DTYPE[self.precision].type
        self.storage_dtype = half.STORAGE_DTYPE[self.precision].type
        self.arrays: dict[int, np.ndarray] = {}
        self._scratch_views: dict[int, np.ndarray] = {}  #: arena id -> its view (`_scratch`)
        self.available: set[int] = set()
        self.initialized: set[int] = set()
        self.lock = RLock()  #: serializes init, routine calls, get/set/eval
        _live.add(self)
        self._arrays_epoch = 0
        self._evals: dict[int, Routine | None] = {}  #: tensor id -> its eval routine
        #: what `save`/`load` checkpoint (`tensor.holdings`): params, and persistent nodes
        #: that routines compiled here carry across runs (`carried`: their buffer ids)
        self.holdings: dict[int, Tensor] = {}
        self.carried: set[int] = set()
        self.names: dict[str, Tensor] = {}  #: every tensor compiled here, by its unique name
        #: tensor id -> its name here where it is not `tensor.name` (`holdings.name_uniquely`)
        self.keys: dict[int, str] = {}
        #: buffer id -> name of a routine that computes it inline (virtualized, no buffer)
        self.virtual: dict[int, str] = {}
        self.escaping: set[int] = set()  #: buffer ids to keep materialized in new routines
        self.folded: dict[int, str] = {}  #: constant buffer id -> a routine that folded it
        self.user_set: set[int] = set()  #: buffer ids set by ctx.set (never folded)
        #: tensor ids whose values were set here other than by their initialization
        self.assigned: set[int] = set()
        self.routines: list[Routine] = []  #: the routines compiled here (for recompiling)
        #: routine name -> its buffers' lifetimes by its assignments (`memory_report`)
        self.lifetimes: dict[str, Lifetimes] = {}
        #: routine name -> its assignments, whose lifetimes `memory_report` derives first
        #: (most contexts never ask: deriving them at each compile cost a deep step ~10 ms)
        self._unmeasured: dict[str, A.Asgn] = {}
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
        from ..lowering.arena import scratch_span
        with self.lock:
            span = scratch_span(buf.id)
            if span is not None:
                return self._scratch(buf.id, *span)
            arr = self.arrays.get(buf.id)
            dtype = precisions.storage_dtype(storage(buf, self.precision))
            if arr is not None and arr.shape != buf.dims and not buf.uint4x32:
                new = np.zeros(buf.dims, dtype=dtype)
                new[self._interior(buf.id, buf.dims)] = arr
                arr = self.arrays[buf.id] = new
                self.arrays_epoch += 1
            if arr is None:
                # uint4x32 cells are 16 bytes: vec_length numbers of the precision each
                shape = ((cell_elems(buf, self.precision),) if buf.uint4x32 else buf.dims)
                arr = np.zeros(shape, dtype=dtype)
                self.arrays[buf.id] = arr
            return arr

    def _scratch(self, buf_id: int, start: int, cells: int) -> np.ndarray:
        """An arena's array: cells `start` to `start + cells` of the one scratch block of
        every routine here (`lowering.arena.arena_id`), grown when a routine needs more
        (routines then re-bind theirs)."""
        from ..lowering.arena import SCRATCH_ID
        block = self.arrays.get(SCRATCH_ID)
        if block is None or block.size < start + cells:
            if block is not None:
                self.arrays_epoch += 1
            block = self.arrays[SCRATCH_ID] = np.zeros(start + cells, self.storage_dtype)
            self._scratch_views = {}
        view = self._scratch_views.get(buf_id)
        if view is None:
            view = self._scratch_views[buf_id] = block[start:start + cells]
        return view

    def get(self, x: Tensor | NodeRef) -> np.ndarray:
        """A copy of a tensor's value (or `t.grad`), axes batch, output, input."""
        from . import pipeline
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
            if buf.id not in self.available and (view := views.viewed(ref, self.layout)):
                raise RuntimeDataError(
                    f"'{ref.tensor.label}' is a batch slice of '{view[0].label}' at the "
                    f"runtime index '{view[1]}': a view of that row, with no array of its own; "
                    f"read ctx.get({view[0].label})[{view[1]}] instead", user_span())
            if buf.id not in self.available:
                raise RuntimeDataError(f"'{ref.tensor.label}' ({ref.kind}) has no value in "
                                       "this context: nothing set or computed it yet", user_span())
            arr = self.array(buf)
            self.backend.to_host(arr)  # the device's copy, where routines wrote one
            return precisions.from_storage(storage(buf, self.precision),
                                           arr[self._interior(buf.id, buf.dims)])

    def set(self, x: Tensor | NodeRef, values: Any) -> None:
        """Set a tensor's value from host data of its exact dims."""
        from . import pipeline
        validate.set_args(x, values)
        ref = _ref_of(x)
        with self.lock:
            pipeline.close_tensors([ref.tensor])
            buf = ref.buffer(self.layout)
            dims = ref.tensor.dims()
            # its precision's (`tensor.precisions`); bfloat16: rounded once, from float64
            prec = storage(buf, self.precision)
            arr = precisions.host_values(prec, ref.tensor.label, values)
            if arr.shape != dims and arr.size == int(np.prod(dims)) and arr.ndim <= 1:
                arr = arr.reshape(dims)
            if arr.shape != dims:
                raise RuntimeDataError(f"'{ref.tensor.label}' has dims {dims}, got data "
                                       f"of shape {arr.shape}", user_span())
            id_checks.check_set(ref.tensor, arr)  # ids: integers in [0, vocab)
            if buf.id in self.folded:
                raise RuntimeDataError(f"'{ref.tensor.label}' is a constant folded into "
                                       f"routine '{self.folded[buf.id]}': make it a param or "
                                       "oc.term to set it", user_span())
            t = ref.tensor
            if ref.kind is NodeKind.VALUE and t.init is Init.COMPUTED and not t.operands:
                raise RuntimeDataError(f"'{t.label}' is computed by each routine reading it (a "
                                       "fill or fetch): use a param, oc.term or oc.ndarray", user_span())
            self.user_set.add(buf.id)
            self.array(buf)[self._interior(buf.id, buf.dims)] = precisions.to_storage(prec, arr)
            self.backend.host_written(self.array(buf))
            self.available.add(buf.id)
            self.assigned.add(ref.tensor.id)
            if ref.kind is NodeKind.VALUE:
                self.initialized.add(ref.tensor.id)

    def holds_values_of(self, t: Tensor) -> bool:
        """Whether `t`'s value here is more than its initial one: set or loaded here, or
        written by a routine compiled here (a training step), not only initialized."""
        bid = buffer_id(t)
        return t.id in self.initialized and (
            t.id in self.assigned or any(bid in r.writes for r in self.routines
                                         if r.stem != "init"))

    def eval(self, tensor: Tensor) -> np.ndarray:
        """Run the tensor's forward code here, with this context's current params (first
        initializing only those not yet initialized), and return its value."""
        from . import holdings, pipeline
        with self.lock:
            if tensor.id not in self._evals:
                code = tensor.forward_all()
                self._evals[tensor.id] = (self._compile(code, "eval", True, keep=[tensor])
                                          if code.items else None)
            routine = self._evals[tensor.id]
            if routine is not None:
                routine()
            else:
                pipeline.close_tensors([tensor])  # a lone leaf: nothing compiled closes it
                holdings.name_uniquely(self.names, self.keys, [tensor], self._known_elsewhere)
                self.holdings.update((t.id, t) for t in holdings.held([tensor], None,
                                                                      self.name_of))
                self.ensure_initialized([tensor])
            return self.get(tensor)

    # ---- compiling -----------------------------------------------------------------------

    def compile(self, code: Any, *, name: str | None = None,
                keep: Sequence[Tensor | NodeRef] = ()) -> Routine:
        """One backend routine for the whole code sequence. Intermediates it reads once
        are computed inline (virtualized) unless the caller holds them (`tensor.escape`),
        they are in `keep` (values, or `t.grad`), another routine of this context reads
        them, or `get` read them here. Without a `name`, the routine is named by what it
        computes (`routine_<digest>`): rebuilding the same program reuses its compiled code."""
        validate.check_str("Context.compile", "name", name, optional=True)
        for k in keep:
            validate.check_tensor("Context.compile", "keep", k, refs=True)
        return self._compile(code, name or "routine", name is None, keep)

    def _compile(self, code: Any, name: str, content_named: bool,
                 keep: Sequence[Tensor | NodeRef] = ()) -> Routine:
        from . import holdings
        from .routine import Routine
        prepare = getattr(self.backend, "prepare", None)  # an optional backend hook
        if prepare is not None:
            prepare(self.precision)  # the C backend starts building its kernel meanwhile
        with self.lock:
            code = as_code(code)
            code = code + schedules.pending_advances(code)  # a schedule read by an update
            self.escaping.update(_buffer_id(_ref_of(k)) for k in keep)
            held = frozenset(user_held())
            routine = Routine(self, code, name, held, content_named=content_named)
            self.escaping.update(routine.needs)
            for r in self.routines:
                if routine.needs & r.virtual:
                    r.stale = True  # recompiled, keeping what this routine reads
            self.routines.append(routine)
            holdings.name_uniquely(self.names, self.keys, [*code.tensors(), *routine.held_out],
                                   self._known_elsewhere)
            self.holdings.update((t.id, t) for t in holdings.held(routine.held_out,
                                                                  self.carried, self.name_of))
            return routine

    def name_of(self, t: Tensor) -> str:
        """`t`'s unique name in this context (its checkpoint key): `t.name`, unless `t`
        was compiled in another context first under a name this context had given to
        another tensor (then numbered here: `holdings.name_uniquely`)."""
        return self.keys.get(t.id, t.name)

    def _known_elsewhere(self, t: Tensor) -> bool:
        return any(c is not self and c.names.get(t.name) is t for c in list(_live))

    # ---- checkpoints -------------------------------------------------------------------

    def save(self, path: str | os.PathLike[str]) -> None:
        """Checkpoint the state this context holds (params, optimizer state and counters
        of the routines compiled in it; `tensor.holdings`) to a safetensors file keyed by
        `tensor.name`; the write is atomic (`tensor.checkpoint`).
        Example: ``ctx.save("model.safetensors")``."""
        from . import checkpoint, holdings
        target = checkpoint.path_arg("save", path)
        with self.lock:
            held = {self.name_of(t): t for t in self.holdings.values()}
            self.ensure_initialized(list(held.values()))  # so that the file has every entry
            arrays = {n: np.ascontiguousarray(self.get(t)) for n, t in sorted(held.items())}
            bf16 = frozenset(n for n, t in held.items() if self._stored(t) is Precision.BFLOAT16)
        checkpoint.write(target, arrays, self.precision.value, holdings.order_keys(held), bf16)

    def load(self, path: str | os.PathLike[str], *, by: str = "name") -> None:
        """Set every held param and node from a checkpoint, matching entries by name or,
        with ``by="order"``, by creation order and shape (a model rebuilt under other
        names). Strict: a missing, extra, mis-shaped or wrong-dtype entry, or one that does
        not match its digest, is an `oc.CheckpointError` naming it, and nothing changes; a
        file without digests loads with a warning. Compile the routines first; loaded
        tensors are not re-initialized. Example: ``ctx.load("model.safetensors")``."""
        from . import checkpoint, holdings
        source = checkpoint.path_arg("load", path)
        if by not in holdings.BY:
            validate.fail(ArgumentError, f"Context.load: by must be one of {holdings.BY}, "
                                         f"got {validate.describe(by)}")
        entries = checkpoint.read(source)  # digests verified, when it has them
        with self.lock:
            held = {self.name_of(t): t for t in self.holdings.values()}
            scratch = {n for n, t in self.names.items() if t.id not in self.holdings}
            self._check_bf16(source, entries, held, {n: n for n in held if n in entries.arrays})
            pairs = holdings.match(source, entries, held,
                                   lambda t: precisions.value_dtype(self._stored(t)), by, scratch)
            self._check_bf16(source, entries, held, pairs)
            if not entries.verified:
                warnings.warn(f"checkpoint {source} has no {checkpoint.FORMAT} digests "
                              "(written by another tool or an older version): its values "
                              "could not be verified", UserWarning, stacklevel=2)
            for name, t in held.items():
                self.set(t, entries.arrays[pairs[name]])

    def lower_code(self, code: Any, *, name: str | None = None
                   ) -> tuple[LoopProgram, A.Asgn, list[Tensor]]:
        """Run the compile pipeline (`tensor.pipeline`): close shapes, derive projections,
        build and simplify the assignments, lower to loop IR, virtualize, bind statics."""
        out = self.lowered(as_code(code), name or "routine", content_named=name is None)
        return out.prog, out.asgn, out.held_out

    def lowered(self, code: Code, name: str, keep: frozenset[int] = frozenset(), *,
                content_named: bool = False) -> pipeline.Lowered:
        """The pipeline's output for `code`, keeping what this context must keep and the
        buffers in `keep` (named `name`, or `name_<digest>` when `content_named`)."""
        from . import pipeline
        opts = pipeline.Options(name, self.precision, content_named=content_named,
                                keep=frozenset(self.escaping) | keep,
                                no_fold=frozenset(self.user_set),
                                fusion_limit=self.backend.fusion_limit,
                                layout=self.layout, projections=self.projections)
        out = pipeline.run(code, opts)
        self.lifetimes.pop(out.prog.name, None)
        self._unmeasured[out.prog.name] = out.asgn
        return out

    def memory_report(self) -> MemoryReport:
        """The bytes this context's buffers hold, against what an allocator by liveness
        needs (`tensor.memory`). Example: ``print(ctx.memory_report())``."""
        from ..lowering.asgn_analysis import lifetimes
        from . import memory
        with self.lock:
            for name, asgn in self._unmeasured.items():
                self.lifetimes[name] = lifetimes(asgn)
            self._unmeasured.clear()
            return memory.report(self.arrays, self.escaping | self.user_set,
                                 self._held_buffers(), self.lifetimes,
                                 {r.name for r in self.routines},
                                 np.dtype(self.storage_dtype).itemsize)

    def _held_buffers(self) -> frozenset[int]:
        """The value and grad buffer ids of the held-out tensors (params, optimizer state)."""
        return frozenset(b for t in self.holdings.values()
                         for b in (buffer_id(t), buffer_id(t, NodeKind.GRAD)))

    def adopt(self, out: pipeline.Lowered, routine: str) -> None:
        """Record what the pipeline decided for a routine compiled here: its buffers'
        layout (fixed from now on: they are allocated), its projections (reused by later
        compilations), the buffers it computes inline and the constants it folded."""
        from . import holdings
        self.layout.update(out.layout)
        self.projections.update(out.projections)
        self.carried |= holdings.carried(out.asgn)
        for b in out.virtual:
            self.virtual[b] = routine
        for b in out.folded:
            self.folded[b] = routine

    def materialize(self, buf_id: int) -> None:
        """Keep a buffer from now on: the routines that virtualized it are recompiled."""
        self.escaping.add(buf_id)
        for r in self.routines:
            if buf_id in r.virtual:
                r.stale = True

    def _check_bf16(self, source: Any, entries: checkpoint.Entries, held: dict[str, Tensor],
                    pairs: dict[str, str]) -> None:
        """BF16 entries load exactly into bfloat16 tensors (`pairs`: name -> entry)."""
        for name, entry in sorted(pairs.items()):
            bf16 = self._stored(held[name]) is Precision.BFLOAT16
            if (entry in entries.bfloat16) != bf16:
                raise CheckpointError(
                    f"checkpoint {source}: entry '{entry}' is "
                    f"{entries.arrays[entry].dtype if bf16 else 'bfloat16'}, '{name}' is "
                    f"stored in {self._stored(held[name]).value}", user_span())

    def _stored(self, t: Tensor) -> Precision:
        """How `t`'s value is stored here (its own precision, else the context's)."""
        return precisions.of(t, NodeKind.VALUE, self.precision)

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
        from .initialization import init_order, init_plan
        with self.lock:
            todo = init_order(tensors, self.initialized)
            if not todo:
                return
            plan = init_plan(todo, self.precision)
            for t, values in plan.data:
                self.set(t, values)
                self.assigned.discard(t.id)  # its initial value
            for w, value in plan.words:  # word constants, embedded exactly (seed 001)
                arr = self.array(w.buffer(layout=self.layout))
                arr.view(np.uint32)[:4] = value
                self.backend.host_written(arr)
            if plan.code.items:
                self._compile(plan.code, "init", True).run_unchecked()
            for t in todo:
                self.initialized.add(t.id)
                self.available.add(buffer_id(t))


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


def holds_buffer(t: Tensor) -> bool:
    """Whether a live context has an array of `t`'s value or grad, or compiled code that
    touches it (`set_precision`)."""
    ids = (buffer_id(t), buffer_id(t, NodeKind.GRAD))
    return any(i in c.arrays for c in list(_live) for i in ids) or \
        any(c.names.get(t.name) is t or t.id in c.keys for c in list(_live))


def warn_if_trained_elsewhere(ctx: Context, tensor: Tensor, fn: str) -> None:
    """Warn (at the caller's caller's line) when `ctx` is about to give `tensor`'s params
    fresh initial values while another live context holds values of them (set, loaded or
    written by a routine there): `oc.eval(loss)`
    after training in `ctx2` evaluates an untrained model, which is rarely what was meant."""
    fresh = [p for p in tensor.params() if p.id not in ctx.initialized]
    if not fresh:
        return
    for other in list(_live):
        names = [p.name for p in fresh if other is not ctx and other.holds_values_of(p)]
        if names:
            shown = ", ".join(f"'{n}'" for n in names[:3]) + (" ..." if len(names) > 3 else "")
            warnings.warn(
                f"oc.{fn} runs in the default context, where {shown} have no values yet: they "
                "get fresh initial values. Another context holds values of them (trained "
                f"there?): call that context's {fn}(...) or pass ctx= to use them",
                UserWarning, stacklevel=3)
            return

