"""The compile pipeline, read top to bottom: Code -> close shapes -> projections ->
assignments IR -> simplify -> loop IR -> fold constants -> unroll -> inline -> fuse epilogues
-> interchange, fuse nests, parallel loops (`pipeline_passes`) -> bind static arguments -> a
backend renders or compiles it. Each pass is a function from one IR to the next (the loop-IR
passes also return what they decided); `STAGES` lists them in order; OCANNL_AST_CHECK=1
verifies the assignments IR after each stage making it, the loop IR after the last stage.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, assert_never

from .. import config
from ..errors import ShapeError
from ..infer import padding
from ..infer.padding import Margins
from ..infer.projections import derive_projections as derive_record_projections
from ..infer.relations import logic_name
from ..lowering import assignments as A
from ..lowering import unit_memo
from ..lowering.checks import number_checks
from ..lowering.coupled import check_cover
from ..lowering.digest import content_name
from ..lowering.free_syms import free_symbols
from ..lowering.gc_pause import gc_paused
from ..lowering.loop_ir import CONTRACTION_MIN_WORK, IndexExpr, LoopProgram, Precision
from ..lowering.lower import NEUTRAL, lower
from ..lowering.simplify import fold_zero_fills
from ..records import record
from . import holdings, views
from .node import (
    AccumForm,
    AccumItem,
    CheckItem,
    Code,
    EmbedDim,
    FetchItem,
    Init,
    Item,
    NodeRef,
    OpRecord,
    Tensor,
    VecItem,
    buffer_id,
    buffer_ids,
)
from .param_sums import check_param_sums
from .pipeline_passes import (
    NO_ENTRIES,
    Decided,
    fuse_loops,
    interchange_loops,
    parallel_loops,
    share_storage,
    unroll_loops,
    virtualizing,
)
from .plain_set import check_plain_set
from .precisions import kept as kept_precisions

#: closing shapes and lowering touch solver state shared by every tensor of a graph
lowering_lock = threading.RLock()


@record
class Options:
    """What the passes need besides their input IR."""

    name: str  #: the routine's name, or the stem of it when `content_named`
    precision: Precision = Precision.FLOAT32
    #: inline single-use pointwise intermediates and fold constants (None: the
    #: OCANNL_AST_VIRTUALIZE environment variable, on unless it is "0")
    virtualize: bool | None = None
    #: buffer ids that stay materialized besides the held-out tensors' (the caller's reads)
    keep: frozenset[int] = frozenset()
    #: buffer ids of constants not to fold (their values were set by the caller)
    no_fold: frozenset[int] = frozenset()
    #: buffer id -> value of the constants to fold (`run` adds the number constants)
    constants: tuple[tuple[int, float], ...] = ()
    #: reductions of at least this many multiply-adds keep their own loop nest (no epilogue
    #: fusion): the backend's `fusion_limit`, where it runs them as contraction kernels
    fusion_limit: int = CONTRACTION_MIN_WORK
    #: buffer id -> margins of the buffers the caller already laid out (a context's
    #: arrays; () when unpadded): their layout is fixed
    layout: Mapping[int, Margins] = NO_ENTRIES
    #: projections the caller derived before (they never change once shapes are closed)
    projections: Mapping[OpRecord, A.Projections] = NO_ENTRIES
    #: name the routine `<name>_<digest of the program>` (`lowering.digest`): the same
    #: program, the same name, source and compile-cache entry, whatever was built before
    content_named: bool = False
    #: run the scheduling passes (`pipeline_passes`; None: OCANNL_AST_SCHEDULE)
    schedule: bool | None = None
    threads: int | None = None  #: parallel loops' threads (None: OCANNL_AST_THREADS)


# ---- pass 1: close shapes (Code -> Code) -------------------------------------------------

def close_shapes(code: Code, opts: Options) -> Code:
    """Close the shapes of every tensor the code touches and of whatever the held-out
    tensors' initializers read (they are initialized by routines of their own)."""
    tensors = holdings.tensors_of(code)
    measured = [it.op.tensor for it in code if isinstance(it, FetchItem)
                and isinstance(it.op, EmbedDim)]  # oc.embed_dim reads their closed dims
    close_tensors([*tensors, *measured, *(d for t in held_out(tensors) for d in init_deps(t))])
    return code


def close_tensors(tensors: Iterable[Tensor], *, dependencies: bool = False) -> None:
    """Close the shapes of these tensors, with `dependencies` of everything they depend on
    too (their subgraphs and what their initializers read), under the process-wide
    lowering lock: the one place shapes are closed (compile, `oc.infer_shapes`, get/set)."""
    if dependencies:
        tensors = [s for t in tensors for u in t.subgraph() for s in (u, *init_deps(u))]
    if shapes := {id(t.shape): t.shape for t in tensors}:
        with lowering_lock:
            next(iter(shapes.values())).solver.close(list(shapes.values()))


def held_out(tensors: Sequence[Tensor]) -> list[Tensor]:
    """The held-out tensors (params, constants, nodes) among these or viewed by them."""
    out: dict[int, Tensor] = {}
    for t in tensors:
        base = t.alias_of.tensor if t.alias_of is not None else t
        if base.is_held_out:
            out.setdefault(base.id, base)
    return list(out.values())


def init_deps(t: Tensor, *, transitive: bool = True) -> list[Tensor]:
    """Every tensor the initializer of `t` reads (through nested tensor-initialized params
    too when `transitive`), in creation order."""
    out: dict[int, Tensor] = {}
    stack = [t.init_value] if isinstance(t.init_value, Tensor) else []
    while stack:
        for s in stack.pop().subgraph():
            if s.id not in out:
                out[s.id] = s
                if transitive and isinstance(s.init_value, Tensor):
                    stack.append(s.init_value)
    return sorted(out.values(), key=lambda s: s.id)


# ---- pass 2: projections and layout (Code -> ProjectedCode) -----------------------------

@record
class ProjectedCode:
    """Code whose operations all have their projections derived (shapes closed), and the
    layout of its buffers."""

    code: Code
    projections: Mapping[OpRecord, A.Projections]
    #: buffer id -> padding margins of every buffer the code touches; () when unpadded
    layout: Mapping[int, Margins]


def derive_projections(code: Code, opts: Options) -> ProjectedCode:
    """Derive the projections of every operation the code's assignments read (seed 000),
    once per operation (those in `opts.projections` are reused: shapes never change after
    closing), and lay out the buffers (`lay_out`)."""
    table: dict[OpRecord, A.Projections] = {}
    for it in code.items:
        if isinstance(it, AccumItem) and it.record not in table:
            known = opts.projections.get(it.record)
            table[it.record] = known if known is not None else record_projections(it.record)
    return ProjectedCode(code, table, lay_out(code, table, opts.layout))


def lay_out(code: Code, table: Mapping[OpRecord, A.Projections],
            fixed: Mapping[int, Margins]) -> dict[int, Margins]:
    """Padding inference (seed 001): each padded axis an operation addresses widens its
    tensor's margins (value and grad buffers alike) to the running maximum; a buffer in
    `fixed` (laid out by an earlier compilation) keeps its layout. Returns the margins of
    every buffer the code touches."""
    wide: dict[int, Margins] = {}  #: value buffer id -> margins widened here
    for rec, p in table.items():
        for slot, axis, left, right in p.margins:
            t = (rec.result if slot == 0 else rec.operands[slot - 1]).base()
            vid = buffer_id(t)
            cur = wide.get(vid) or fixed.get(vid) or tuple((0, 0) for _ in t.dims())
            new = padding.widen(cur, axis, (left, right))
            if new == cur:
                continue
            if vid in fixed:
                raise ShapeError(f"'{t.label}' needs padding margins {new[axis]} on axis "
                                 f"{axis} for '{rec.name}', but its buffers were already laid "
                                 f"out with {cur[axis]} by an earlier compilation: compile its "
                                 "padded readers first (or together)", rec.span)
            wide[vid] = new
    layout: dict[int, Margins] = {}
    for t in holdings.tensors_of(code):
        value, grad = buffer_ids(t.base())
        m = wide.get(value) or fixed.get(value) or ()
        layout[value] = layout[grad] = m if any(lo or hi for lo, hi in m) else ()
    return layout


def record_projections(rec: OpRecord) -> A.Projections:
    """The projections of one operation, from its logic and its operands' closed shapes."""
    try:
        check_param_sums(rec, rows := [o.layout_rows() for o in rec.operands])
        return derive_record_projections(rec.logic, rec.result.layout_rows(), rows)
    except ShapeError as e:
        raise e.with_span(rec.span) from None


# ---- pass 3: assignments IR (ProjectedCode -> Asgn) --------------------------------------

def to_assignments(pc: ProjectedCode, opts: Options) -> A.Asgn:
    """The assignments IR: node references become buffers, each assignment gets its
    operation's projections or the slot-permuted view it reads."""
    return A.seq(*(_assignment(it, pc.projections, pc.layout, opts.keep) for it in pc.code.items))


def _assignment(it: Item, table: Mapping[OpRecord, A.Projections],
                layout: Mapping[int, Margins], keep: frozenset[int]) -> A.Asgn:
    match it:
        case AccumItem(form=AccumForm.BLOCK):
            p = _view(table[it.record], it) if it.slots is not None else table[it.record]
            try:
                check_cover(p, f"{it.record.name} ({logic_name(it.record.logic)})")
            except ShapeError as e:
                raise e.with_span(it.record.span) from None
            return A.Block(views.target(it, it.lhs, layout), it.accum, it.initialize_neutral,
                           views.buffers_of(it.rhs, layout), p, it.label)
        case AccumItem(form=AccumForm.REV_SIDES):
            p = _view(table[it.record], it) if it.slots is not None else table[it.record]
            return A.RevSides(views.buffer_of(it.lhs, layout), it.accum,
                              tuple(views.target(it, r, layout) for r in it.rhs), p, it.label)
        case AccumItem():
            lhs = views.copy_target(it, layout, keep)
            if lhs is None:
                return A.Noop()  # a view's forward copy: the parent's row onto itself
            p = table[it.record]
            if it.slots is not None:
                p = _view(p, it)
            check_plain_set(it, p, table[it.record])
            margins = [_margins(r, layout) for r in (it.lhs, *it.rhs)]
            if any(margins):
                p = _shift_into_margins(p, margins)
            return A.Accum(lhs, it.accum, it.initialize_neutral, it.expr,
                           views.buffers_of(it.rhs, layout), p, it.label,
                           tuple(margins[1:]), _margin_value(it))
        case FetchItem(node=n, op=op):
            return A.Fetch(views.target(None, n, layout),
                           op.resolve() if isinstance(op, EmbedDim) else op, _margins(n, layout))
        case CheckItem(symbol=s, tensor=t, code=c):
            return A.CheckStatic(s, t.dims()[0], c)
        case VecItem(lhs=lhs, op=op, rhs=rhs, length=n, label=label):
            return A.VecSet(views.target(None, lhs, layout), op, views.buffer_of(rhs, layout),
                            n, label)
        case _:
            assert_never(it)


def _view(p: A.Projections, it: AccumItem) -> A.Projections:
    """The projections an assignment reads through slots (seed 000: g1 =+ g * v2)."""
    assert it.slots is not None
    refs = (it.lhs, *it.rhs)
    maps: list[tuple[tuple[A.ProjIndex, ...], tuple[int, ...]]] = []
    for ref, s in zip(refs, it.slots, strict=True):
        maps.append(p.slot(s) if s >= 0 else (_slotless_index(ref, it.record),
                                               ref.tensor.dims()))
    gates = p.regated(tuple(it.slots[1:])) if p.gates else ()
    return A.Projections(p.product, maps[0][0], tuple(m for m, _ in maps[1:]), maps[0][1],
                         tuple(d for _, d in maps[1:]), p.debug, factors=p.factors,
                         gates=gates)


def _margin_value(it: AccumItem) -> float | None:
    """Margins read as the neutral element of the operation's forward accumulation (0 for a
    sum, -inf for a max), in its gradient assignments too: a max-pool's backward compares
    the margins with the max, which must never tie with -inf."""
    for own in it.record.result._own.items:
        if isinstance(own, AccumItem) and own.record is it.record and own.slots is None:
            return NEUTRAL[own.accum]
    return None


def _margins(ref: NodeRef, layout: Mapping[int, Margins]) -> Margins:
    """The margins of a reference's buffer in the layout; () when unpadded."""
    return layout.get(buffer_id(ref.tensor, ref.kind), ())


def _shift_into_margins(p: A.Projections, margins: list[Margins]) -> A.Projections:
    """Index maps over buffers: a padded axis's index moves right by its left margin, dims
    are the buffer's (the logical shape plus the margins); `margins`: the assignment's
    buffers' (its target's, then its operands')."""
    maps = []
    for i, m in enumerate(margins):
        index, dims = p.slot(i)
        if m:
            index = tuple(_shift(ix, lo) for ix, (lo, _) in zip(index, m, strict=True))
            dims = padding.padded_dims(dims, m)
        maps.append((index, dims))
    return A.Projections(p.product, maps[0][0], tuple(m for m, _ in maps[1:]), maps[0][1],
                         tuple(d for _, d in maps[1:]), p.debug, factors=p.factors,
                         gates=p.gates)


def _shift(ix: A.ProjIndex, by: int) -> A.ProjIndex:
    """An index moved right by `by` cells (a left margin); a concatenated index moves each
    component's injection offset."""
    if isinstance(ix, A.ConcatIndex):
        return A.ConcatIndex(tuple((s, off + by) for s, off in ix.parts))
    return IndexExpr(ix.terms, ix.offset + by)


def _slotless_index(ref: NodeRef, record: OpRecord) -> tuple[IndexExpr, ...]:
    """Index map of a tensor that has no slot in the record: only size-one axes allowed."""
    dims = ref.tensor.dims()
    if any(d != 1 for d in dims):
        raise ShapeError(f"'{ref.tensor.label}' (dims {dims}) has no slot in the projections of "
                         f"'{record.name}'; name it by slot (v1, g2, x_rhs1, ...)", record.span)
    return tuple(IndexExpr((), 0) for _ in dims)


# ---- pass 4: simplify (Asgn -> Asgn) -----------------------------------------------------

def simplify(asgn: A.Asgn, opts: Options) -> A.Asgn:
    """Fold zero fills into the first `=+` of the same buffer (`lowering.simplify`)."""
    return fold_zero_fills(asgn)


# ---- pass 5: lower (Asgn -> LoopProgram) --------------------------------------------------

def lower_loops(asgn: A.Asgn, opts: Options) -> LoopProgram:
    """Loop nests over every buffer the assignments touch (`lowering.lower`)."""
    return lower(asgn, opts.name, precision=opts.precision)


# ---- passes 6-8: virtualize (LoopProgram -> LoopProgram, and what each decided) ------------



def fold_constant_loops(prog: LoopProgram, opts: Options) -> Decided:
    """Read the scalar constants of `opts.constants` as numbers (`lowering.fold_constants`)."""
    if not virtualizing(opts):
        return Decided(prog)
    from ..lowering.fold_constants import fold_constants  # imported when first compiling

    out = fold_constants(prog, dict(opts.constants))
    return Decided(out.prog, folded=out.folded)


def inline_loops(prog: LoopProgram, opts: Options) -> Decided:
    """Inline single-use pointwise intermediates (`lowering.inline`); the buffers in
    `opts.keep` stay materialized."""
    if not virtualizing(opts):
        return Decided(prog)
    from ..lowering.inline import inline

    out = inline(prog, opts.keep)
    return Decided(out.prog, virtual=out.virtual)


def fuse_epilogue_loops(prog: LoopProgram, opts: Options) -> Decided:
    """Move a reduction's single pointwise reader into it (`lowering.fuse_epilogue`), below
    the backend's `opts.fusion_limit`; the buffers in `opts.keep` stay materialized."""
    if not virtualizing(opts):
        return Decided(prog)
    from ..lowering.fuse_epilogue import fuse_epilogue

    out = fuse_epilogue(prog, opts.keep, opts.fusion_limit)
    return Decided(out.prog, virtual=out.virtual)


def with_escaping(code: Code, opts: Options) -> Options:
    """`opts` keeping every held-out tensor's buffers (params, their grads, optimizer
    state, data) and folding the number constants (`oc.number`, literals) not in
    `opts.no_fold`."""
    tensors, constants = holdings.tensors_of(code), dict(opts.constants)
    keep = set(opts.keep) | kept_precisions(tensors, opts.precision)  # own storage
    for t in held_out(tensors):
        keep.update(buffer_ids(t))  # its value and grad buffers
        if t.init is Init.CONST and isinstance(t.init_value, float) and buffer_id(t) not in \
                opts.no_fold and t.precision is None:  # own storage: read as stored
            constants[buffer_id(t)] = t.init_value
    return dataclasses.replace(opts, keep=frozenset(keep),
                               constants=tuple(sorted(constants.items())))


# ---- pass 9: bind static arguments (LoopProgram -> LoopProgram) ---------------------------

def bind_statics(prog: LoopProgram, opts: Options) -> LoopProgram:
    """The static arguments (symbols no loop binds, in creation order); checks numbered."""
    statics = tuple(sorted(free_symbols(prog.body), key=lambda s: s.id))
    body = number_checks(prog.body) if statics else prog.body  # (checks are of statics)
    return LoopProgram(prog.name, prog.buffers, statics, body, prog.precision)


# ---- pass 8: name (LoopProgram -> LoopProgram) ----------------------------------------------

def name_program(prog: LoopProgram, opts: Options) -> LoopProgram:
    """The routine's final name: `opts.name`, or with `content_named` that stem and a digest
    of what the program computes (never a process counter or a tensor id)."""
    if not opts.content_named:
        return prog
    return dataclasses.replace(prog, name=content_name(opts.name, prog))


# The verifiers run only with OCANNL_AST_CHECK=1: imported then, not with the package.


def _verify_loops(prog: LoopProgram) -> None:
    from ..lowering.loop_verify import verify_program
    verify_program(prog)


def _verify_asgn(asgn: Any) -> None:
    from ..lowering.asgn_verify import verify_asgn
    verify_asgn(asgn)


# ---- the stages ---------------------------------------------------------------------------

@record
class Stage:
    """One pass: its name, the function from one IR to the next, and the verifier of its
    output (run when OCANNL_AST_CHECK=1)."""

    name: str
    run: Callable[[Any, Options], Any]
    verify: Callable[[Any], None] | None = None


STAGES: tuple[Stage, ...] = (
    Stage("close_shapes", close_shapes),                        # Code -> Code
    Stage("projections", derive_projections),                   # Code -> ProjectedCode
    Stage("assignments", to_assignments, _verify_asgn),         # ProjectedCode -> Asgn
    Stage("simplify", simplify, _verify_asgn),                  # Asgn -> Asgn
    Stage("lower", lower_loops),                                # Asgn -> LoopProgram
    Stage("fold_constants", fold_constant_loops),               # LoopProgram -> Decided
    Stage("unroll", unroll_loops),                              # LoopProgram -> Decided
    Stage("inline", inline_loops),                              # LoopProgram -> Decided
    Stage("fuse_epilogue", fuse_epilogue_loops),                # LoopProgram -> Decided
    Stage("interchange", interchange_loops),                    # LoopProgram -> Decided
    Stage("fuse_nests", fuse_loops),                            # LoopProgram -> Decided
    Stage("parallel", parallel_loops),                          # LoopProgram -> Decided
    Stage("share_storage", share_storage),                      # LoopProgram -> Decided
    Stage("bind_statics", bind_statics, _verify_loops),         # LoopProgram -> LoopProgram
    Stage("name", name_program),                                # LoopProgram -> LoopProgram
)


@record
class Lowered:
    """What a backend and a routine need: the loop program, the assignments it came from
    (for the read/write sets), the held-out tensors to initialize first; and what the
    pipeline decided that the caller keeps: the projections and the buffers' layout."""

    prog: LoopProgram
    asgn: A.Asgn
    held_out: list[Tensor]
    trace: tuple[tuple[str, Any], ...]  #: each stage's name and output, in order
    virtual: frozenset[int] = frozenset()  #: buffers virtualized (computed inline)
    folded: frozenset[int] = frozenset()  #: constant buffers folded into expressions
    #: the projections of every operation the code reads (`ProjectedCode.projections`)
    projections: Mapping[OpRecord, A.Projections] = NO_ENTRIES
    #: buffer id -> margins of every buffer the code touches (`ProjectedCode.layout`)
    layout: Mapping[int, Margins] = NO_ENTRIES


def checking() -> bool:
    """Verify between stages (OCANNL_AST_CHECK=1; the test suite sets it)."""
    return config.checking()


def run(code: Code, opts: Options) -> Lowered:
    """Run the stages in order on `code` (under the process-wide lowering lock); a stage
    that returns a `Decided` passes its program on and its decisions to the `Lowered`."""
    trace: list[tuple[str, Any]] = []
    ir: Any = code
    virtual = folded = scratch = frozenset[int]()
    with lowering_lock, gc_paused(), unit_memo.shared():
        caller_keep, opts = opts.keep, with_escaping(code, opts)
        tensors = holdings.tensors_of(code)  # (memoized here; read again after the stages)
        for stage in STAGES:
            ir = stage.run(ir, opts)
            if isinstance(ir, Decided):
                virtual, folded, ir = virtual | ir.virtual, folded | ir.folded, ir.prog
            if stage.verify is not None and checking():
                stage.verify(ir)
            trace.append((stage.name, ir))
            if stage.name == "simplify":  # scratch nodes are intermediates from here on
                scratch = holdings.scratch(tensors, ir, caller_keep)
                opts = dataclasses.replace(opts, keep=opts.keep - scratch)
    out = dict(trace)
    projected: ProjectedCode = out["projections"]
    virtual |= views.dropped(code, projected.layout, opts.keep)  # views' forward copies
    held = [t for t in held_out(tensors) if buffer_id(t) not in scratch]
    return Lowered(ir, out["simplify"], held, tuple(trace), virtual, folded,
                   projected.projections, projected.layout)


def render(code: Code, backend: Any, opts: Options) -> str:
    """The source a backend would compile for `code` (`oc.render`)."""
    return str(backend.render(run(code, opts).prog))
