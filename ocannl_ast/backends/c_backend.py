"""C backend: render the loop IR to C (in a `CSyntax` dialect), compile it with gcc
(`compiler`: flags and the verified disk cache), load and call it with cffi (`runtime`).

Stage: last. Input: a verified `LoopProgram`. Output: C source (`render_c`) and a callable
`CompiledRoutine` over NumPy arrays (`compile_c`), cached on disk by a hash of its inputs.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import assert_never

from ocannl_ast import config
from ocannl_ast.backends import c_region
from ocannl_ast.backends.c_contraction import threads_setting
from ocannl_ast.backends.c_contraction_kernel import SHARED_LINKAGE, kernel_c, run_prototype
from ocannl_ast.backends.c_dedup import Nest, Shared, literal, share
from ocannl_ast.backends.c_renderer import CRenderer
from ocannl_ast.backends.c_syntax import C, CSyntax, Word, c_const, c_ident
from ocannl_ast.backends.compiler import (
    DEFAULT_OPT_FLAGS,
    build_cached,
    cache_dir_default,
    effective_flags,
    prebuild_object,
)
from ocannl_ast.backends.protocol import CompiledRoutine
from ocannl_ast.backends.runtime import CRoutine, LoadedLibrary, declare, is_loaded, load
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering import nests, unit_memo
from ocannl_ast.lowering.gc_pause import gc_paused
from ocannl_ast.lowering.loop_ir import (
    Buffer,
    CheckIndex,
    Comment,
    DeclLocal,
    Fill,
    ForLoop,
    LoopProgram,
    Noop,
    Precision,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
)

__all__ = ["DEFAULT_OPT_FLAGS", "CRoutine", "CompiledRoutine", "c_const", "c_ident",
           "cc_jobs", "compile_c", "kernel_objects", "prebuild_kernel", "render_c",
           "render_c_units"]


@dataclass(slots=True)
class _Rendered:
    source: str  #: the translation unit
    cname: str  #: the C function's name
    c_type: str  #: the element type of its buffers
    cdef: str  #: its declaration, for cffi
    checks: dict[int, str] = field(default_factory=dict)  #: CheckIndex code -> description
    flags: tuple[str, ...] = ()  #: gcc flags the source needs (-fopenmp, the dialect's)
    extra_units: tuple[str, ...] = ()  #: more translation units, linked with `source`
    #: translation units compiled once per cache directory and linked in (`kernel_apart`:
    #: the contraction kernel, the same text for every routine of an element type)
    objects: tuple[str, ...] = ()


#: C lines per function of a routine: top-level statements are packed in order into
#: functions of about this size (a bigger statement gets a function of its own), which the
#: entry point calls in order. gcc's time grows faster than linearly in a function's size
#: (one function for a 64-layer MLP step: 14 s of gcc CPU time; parts of 48 lines: 1.3 s);
#: the calls cost nanoseconds.
FUNCTION_LINES = 48

#: Whether statements repeated but for their buffers and offsets share one function
#: (`c_dedup`): the same bits, less C for gcc (a 2-block transformer step: a third less).
SHARE_NESTS = True
#: Smallest routine (C lines of its nests) whose repeated statements share functions: in a
#: small one gcc's time is short and the calls cost (a moons MLP step at batch 20: 3.40 vs
#: 3.11 us with its two bias-gradient sums shared).
SHARE_MIN_LINES = 600

#: Smallest routine (C lines of its functions) split into several translation units, each
#: compiled by its own gcc at once (`OCANNL_AST_CC_JOBS`): below it, the extra processes
#: and the link cost more than they save.
SPLIT_MIN_LINES = 600
#: The contraction kernel's weight, in lines of functions, when units are balanced: gcc
#: spends on it about what it spends on 800 lines of loop nests (measured, -O2).
KERNEL_LINES = 1200
#: Units at most with ``OCANNL_AST_CC_JOBS=auto`` (the default), however many CPUs.
MAX_AUTO_JOBS = 8


@dataclass(frozen=True, slots=True)
class _Part:
    """A function of a routine: its body and the parameters it uses (in program order)."""

    body: tuple[str, ...]
    buffers: tuple[int, ...]  #: positions in `prog.buffers`
    statics: tuple[int, ...]  #: positions in `prog.static_args`
    checked: bool  #: can return an error code
    team: bool = False  #: called by every thread of the routine's parallel region (`c_region`)
    index_checks: bool = False  #: holds a `CheckIndex` (a static argument's bound)


def _parts(r: CRenderer, budget: int, prefix: str = "") -> tuple[list[_Part], list[Shared]]:
    """The routine's body as a sequence of functions of about `budget` lines each; with
    `r.team`, a function holds either statements for the whole team or none of them. With
    a `prefix` (and `SHARE_NESTS`), statements that differ only in their buffers and offsets
    call shared functions (`c_dedup`) named after it, returned second."""
    units = nests.units(r.prog.body)
    if any(isinstance(u, DeclLocal | SetLocal) for u in units):
        units = [r.prog.body]  # routine-level locals: one function keeps them in scope
        r.team = 0
    buf_pos = {b: i for i, b in enumerate(r.prog.buffers)}
    # positions by C name (`CRenderer.used_buffers`, `used_symbols` hold names)
    name_pos = {r.buffers[b]: i for i, b in enumerate(r.prog.buffers)}
    sym_pos = {r.symbols[s]: i for i, s in enumerate(r.prog.static_args)}
    rendered: list[tuple[Nest, set[str], set[str], bool, bool, bool]] = []
    share_on = bool(prefix) and SHARE_NESTS and len(units) > 1
    for u in units:
        if u.__class__ is Comment:  # (a third of a deep model's units: their notes)
            note: list[str] = []
            r.stmt(u, 1, note)
            rendered.append((Nest(note, [], frozenset(), True), set(), set(), False, False,
                             False))
            continue
        r.used_buffers, r.used_symbols, r.checked = set(), set(), False
        r.offset_marks = [] if share_on else None
        lines: list[str] = []
        before = r.team_units
        r.seq((u,), 1, lines)
        is_team = r.team_units > before
        index_checks, writes_to = _unit_facts(u)
        written = frozenset(r.buffers[b] for b in writes_to if b in buf_pos)
        nest = Nest(lines, r.offset_marks or [], written, not (is_team or r.checked))
        rendered.append((nest, r.used_buffers, r.used_symbols, r.checked, is_team,
                         index_checks))
    r.offset_marks = None
    shared: list[Shared] = []
    calls: dict[int, str] = {}
    if share_on and sum(len(n.lines) for n, *_ in rendered) >= SHARE_MIN_LINES:
        types = {r.buffers[b]: r.buffer_type(b) for b in r.prog.buffers}
        shared, calls = share([n for n, *_ in rendered], prefix, types,
                              frozenset(r.symbols[s] for s in r.prog.static_args))
    parts: list[_Part] = []
    lines = []
    bufs: set[str] = set()
    syms: set[str] = set()
    checked = team = index_checks = False

    def close() -> None:
        b_pos = tuple(sorted(name_pos[b] for b in bufs if b in name_pos))
        s_pos = tuple(sorted(sym_pos[s] for s in syms if s in sym_pos))
        body = ("  int ocannl_err = 0;", *lines, "  return ocannl_err;") if team else lines
        parts.append(_Part(tuple(body), b_pos, s_pos, checked, team, index_checks))
        lines.clear()
        bufs.clear()
        syms.clear()

    for k, (u, (nest, u_bufs, u_syms, u_checked, is_team, u_index)) in enumerate(
            zip(units, rendered)):
        unit = [calls[k]] if k in calls else literal(nest.lines, nest.marks)
        comment = isinstance(u, Comment)
        if lines and not comment and (len(lines) + len(unit) > budget or is_team != team):
            tail = _trailing_comments(lines)  # they go with the statement after them
            if lines:
                close()
                checked = index_checks = False
            lines += tail
        if not comment:
            team = is_team
        lines += unit
        bufs.update(u_bufs)
        syms.update(u_syms)
        checked = checked or u_checked
        index_checks = index_checks or u_index
    if lines or not parts:
        close()
    return parts, shared


def _unit_facts(u: Stmt) -> tuple[bool, list[Buffer]]:
    """Whether `u` holds a `CheckIndex`, and the buffers it writes (`walk.writes`, with
    repeats): one walk of its statements."""
    checks = False
    written: list[Buffer] = []
    stack = [u]
    while stack:
        x = stack.pop()
        match x:
            case Seq(stmts=stmts):
                stack += stmts
            case ForLoop(body=body):
                stack.append(body)
            case SetCell(buffer=buf) | Fill(buffer=buf) | SetFromVec(buffer=buf):
                written.append(buf)
            case CheckIndex():
                checks = True
            case Noop() | Comment() | DeclLocal() | SetLocal():
                pass
            case _:
                assert_never(x)
    return checks, written


def _trailing_comments(lines: list[str]) -> list[str]:
    """Remove and return the comment lines that end `lines`."""
    k = len(lines)
    while k > 0 and lines[k - 1].lstrip().startswith("/*") and lines[k - 1].endswith("*/"):
        k -= 1
    tail = lines[k:]
    del lines[k:]
    return tail


def cc_jobs() -> int:
    """How many translation units a large routine may be split into: ``OCANNL_AST_CC_JOBS``
    (a positive count), else (unset or ``auto``) the CPUs this process may use, at most
    `MAX_AUTO_JOBS`."""
    raw = config.cc_jobs()
    if raw in ("", "auto"):
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # not on Linux
            cpus = os.cpu_count() or 1
        return max(1, min(cpus, MAX_AUTO_JOBS))
    if not raw.isdigit() or int(raw) < 1:
        raise BackendError(f"OCANNL_AST_CC_JOBS must be a positive count or 'auto', got {raw!r}")
    return int(raw)


def _code_lines(body: tuple[str, ...]) -> int:
    """Lines of `body` gcc has work in: not its comment lines (a part's notes on virtual
    and constant tensors can be hundreds of lines)."""
    return len(body) - sum(1 for ln in body if ln.endswith("*/") and ln.lstrip().startswith("/*"))


#: What gcc spends on one call of an inlined transcendental helper (`c_math`: exp, expm1,
#: tanh, log), in lines of loop nests (-O2: about 47 ms against 0.6 ms a line and 5 ms a
#: loop, fitted over a transformer step's functions).
HELPER_CALL_LINES = 75
#: What gcc spends on a loop beyond its lines, in lines (its passes run per loop: about 3 ms
#: a loop against 0.6 ms a line, -O2, fitted over a transformer step's units: their loop
#: counts told their times apart where their lines were the same).
LOOP_LINES = 5
#: a call of one, where no word character precedes it (`_weight` checks: a pattern starting
#: with the literal is searched much faster than one starting with ``\b``)
_HEAVY_CALL = re.compile(r"ocannl_(?:exp|expm1|tanh|log)_[fd]\(")


def _weight(body: Sequence[str], code: int | None = None) -> int:
    """What gcc spends on a function, in lines: its lines of code (`_code_lines`, or `code`
    when counted already), plus `HELPER_CALL_LINES` per call of an inlined transcendental
    helper and `LOOP_LINES` per loop."""
    text = "\n".join(body)
    heavy = 0
    for m in _HEAVY_CALL.finditer(text):
        k = m.start()
        if k == 0 or not (text[k - 1].isalnum() or text[k - 1] == "_"):  # at a word start
            heavy += 1
    return ((_code_lines(tuple(body)) if code is None else code) + HELPER_CALL_LINES * heavy
            + LOOP_LINES * text.count("for ("))


def _groups(parts: list[_Part], kernel: bool, jobs: int,
            shared: Sequence[Shared] = ()) -> list[list[int]]:
    """The functions of each translation unit (positions in `parts`, then in `shared` after
    them, in order). Unit 0 holds the entry point and the kernel (weighing `KERNEL_LINES`)
    unless it is compiled apart; the functions go, heaviest first, to the unit of the least
    weight (`_weight`) so far. One unit when `jobs` is 1 or the routine is small (fewer
    than `SPLIT_MIN_LINES` lines of code)."""
    bodies = [*(p.body for p in parts), *(f.body for f in shared)]
    if jobs <= 1 or len(bodies) < 2:
        return [list(range(len(bodies)))]
    code = [_code_lines(b) for b in bodies]
    if sum(n + 2 for n in code) < SPLIT_MIN_LINES:
        return [list(range(len(bodies)))]
    sizes = [_weight(b, n) + 2 for b, n in zip(bodies, code)]
    # unit 0 also holds the entry point: a call and a declaration per part
    load = [(KERNEL_LINES if kernel else 0) + len(parts)] + [0] * (min(jobs, len(sizes)) - 1)
    groups: list[list[int]] = [[] for _ in load]
    for k in sorted(range(len(sizes)), key=lambda k: -sizes[k]):
        g = load.index(min(load))
        groups[g].append(k)
        load[g] += sizes[k]
    return [sorted(groups[0]), *(sorted(g) for g in groups[1:] if g)]


def _shared_def(syntax: CSyntax, f: Shared) -> list[str]:
    """The definition of a shared nest function (`c_dedup`) in `syntax`."""
    params = [syntax.buffer_param(t, name) for t, name in f.buffers]
    params += [syntax.static_param(name) for name in (*f.statics, *f.offsets)]
    return [syntax.function_signature(f.name, params), *f.body, *syntax.epilogue(), ""]


def _render(prog: LoopProgram, syntax: CSyntax = C, budget: int | None = None,
            jobs: int = 1, *, kernel_apart: bool = False) -> _Rendered:
    """The routine's translation units; with `kernel_apart`, the contraction kernel is not
    in them but in `_Rendered.objects` (each unit declares its entry points)."""
    with gc_paused(), unit_memo.shared():  # see `lowering.gc_pause`
        return _render_paused(prog, syntax, budget, jobs, kernel_apart)


def _render_paused(prog: LoopProgram, syntax: CSyntax, budget: int | None,
                   jobs: int, kernel_apart: bool) -> _Rendered:
    r = CRenderer(prog, syntax)
    threads = r.kernels.threads if r.kernels is not None else 1
    r.team = threads if threads > 1 else 0
    cname = c_ident(prog.name, "ocannl_")
    parts, nest_fns = _parts(r, FUNCTION_LINES if budget is None else budget, cname)
    region = r.team > 0 and c_region.usable(parts)
    if r.team and not region:  # render again with a fork and a join per parallel loop
        r = CRenderer(prog, syntax)
        parts, nest_fns = _parts(r, FUNCTION_LINES if budget is None else budget, cname)
    t = r.words[Word.STORAGE]  # the buffers' element type
    head = [f"/* ocannl_ast routine {prog.name} ({prog.precision.value}) */"]
    head += [*syntax.includes, ""]
    head += syntax.helper_defs(r.helpers, r.words)
    kernel = r.kernels.definitions(r.words) if r.kernels is not None else []
    threefry = [*syntax.threefry(r.words), ""] if r.threefry else []
    objects: tuple[str, ...] = ()
    if kernel and kernel_apart:
        objects = kernel_objects(syntax, r.words)
        kernel = []
    proto = [run_prototype(t, r.words[Word.SUFFIX]), ""] if objects else []
    groups = _groups(parts, bool(kernel), jobs, nest_fns)
    # a part another unit defines is hidden (exported inside the shared object only)
    qual = syntax.function_qualifier.removeprefix("static").strip()
    shared = dataclasses.replace(syntax, function_qualifier=f"{qual} {SHARED_LINKAGE}")
    entry = [syntax.entry_signature(cname, t)]
    if any(p.checked for p in parts):
        entry.append("  int rc;")
    functions: list[list[str]] = []
    calls: list[str] = []
    for k, part in enumerate(parts):
        name = f"{cname}_f{k}"
        params = [syntax.buffer_param(r.buffer_type(prog.buffers[i]), r.buffers[prog.buffers[i]])
                  for i in part.buffers]
        params += [syntax.static_param(r.symbols[prog.static_args[i]]) for i in part.statics]
        dialect = syntax if k in groups[0] else shared
        functions.append([dialect.function_signature(name, params), *part.body,
                          *syntax.epilogue(), ""])
        args = [_arg(r, prog.buffers[i], i, t) for i in part.buffers]
        args += [f"statics[{i}]" for i in part.statics]
        calls.append(f"{name}({', '.join(args)})")
    if region:
        entry[:0] = [c_region.KEEP_RC]
        entry += c_region.entry_lines(parts, calls, r.team)
    else:
        entry += [f"  if ((rc = {c}) != 0) return rc;" if p.checked else f"  {c};"
                  for p, c in zip(parts, calls)]
    entry += [*syntax.epilogue(), ""]
    by_value = len(prog.static_args) == 1
    entry += syntax.value_entry(cname, t) if by_value else []
    flags = (*(r.kernels.flags() if r.kernels is not None else ()), *syntax.compile_flags)
    if len(groups) == 1:
        source = "\n".join([*head, *kernel, *proto, *threefry,
                            *(ln for f in nest_fns for ln in _shared_def(syntax, f)),
                            *(ln for f in functions for ln in f), *entry])
        return _Rendered(source, cname, t, syntax.cdef(cname, t, by_value), r.checks, flags,
                         objects=objects)
    units = []
    elsewhere = [k for g in groups[1:] for k in g if k < len(parts)]
    functions += [_shared_def(shared, f) for f in nest_fns]
    for u, group in enumerate(groups):
        text = [f"{head[0][:-3]}, unit {u} of {len(groups)} */", *head[1:]]
        if kernel and u == 0:
            text += [f"#define OCK_RUN_LINKAGE {SHARED_LINKAGE}", *kernel]
        elif kernel or objects:
            text += [run_prototype(t, r.words[Word.SUFFIX]), ""]
        text += threefry
        text += [functions[k][0].removesuffix("{").rstrip() + ";"
                 for k in range(len(parts), len(functions)) if k not in group]
        # shared nest functions first: the parts call them
        text += [ln for k in sorted(group, key=lambda k: (k < len(parts), k))
                 for ln in functions[k]]
        if u == 0:
            text += [functions[k][0].removesuffix("{").rstrip() + ";" for k in sorted(elsewhere)]
            text += ["", *entry]
        units.append("\n".join(text))
    return _Rendered(units[0], cname, t, syntax.cdef(cname, t, by_value), r.checks, flags,
                     tuple(units[1:]), objects)


def kernel_objects(syntax: CSyntax, words: dict[str, str]) -> tuple[str, ...]:
    """The contraction kernel as a translation unit of its own, its entry points exported
    inside the shared object it is linked into (`SHARED_LINKAGE`). One unit: split in two
    (the GEMM driver, the small path) it cost 1.25 s of gcc CPU against 0.94 s, for 0.1 s
    less wall time on an idle machine."""
    kernel = kernel_c(words[Word.TYPE], words[Word.SUFFIX])
    return ("\n".join([f"/* ocannl_ast contraction kernel ({words[Word.TYPE]}) */",
                       *syntax.includes, f"#define OCK_RUN_LINKAGE {SHARED_LINKAGE}",
                       *kernel]),)


def _arg(r: CRenderer, buf: Buffer, i: int, table_type: str) -> str:
    """Entry table slot `i` as the parameter of a part: cast where the buffer is stored in
    another type than the table's (its own precision, `Buffer.precision`)."""
    own = r.buffer_type(buf)
    return f"bufs[{i}]" if own == table_type else f"(({own}*)bufs[{i}])"


def render_c(prog: LoopProgram, syntax: CSyntax = C) -> str:
    """The translation unit of a routine in `syntax`: parts ``static int name_f0(T* restrict
    b..., int64_t s...)`` of about `FUNCTION_LINES` lines each, and the entry point
    ``int name(T* const* bufs, const int64_t* statics)`` calling them in order.
    Example: ``render_c(prog)`` starts with a comment, then the includes.
    """
    return _render(prog, syntax).source


def render_c_units(prog: LoopProgram, syntax: CSyntax = C, jobs: int | None = None
                   ) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    """The translation units of a routine as `compile_c` builds them, the gcc flags they
    need besides `compiler.effective_flags`, and the shared units linked with them (the
    contraction kernel, when the routine calls it: compiled once per cache directory,
    `compiler.ensure_object`): one unit (`render_c`'s, less the kernel), or, for a routine
    of `SPLIT_MIN_LINES` or more when `jobs` (default `cc_jobs()`) > 1, up to `jobs` units,
    the first holding the entry point.
    Example: ``units, flags, objects = render_c_units(prog, jobs=2)``.
    """
    rendered = _render(prog, syntax, jobs=cc_jobs() if jobs is None else jobs,
                       kernel_apart=True)
    return (rendered.source, *rendered.extra_units), rendered.flags, rendered.objects


def prebuild_kernel(syntax: CSyntax, precision: Precision,
                    opt_flags: Sequence[str] = DEFAULT_OPT_FLAGS) -> None:
    """Start compiling the contraction kernel's object for `precision` in the background,
    unless it is cached (`compiler.prebuild_object`): a routine about to be lowered then
    finds it built. With ``OCANNL_AST_THREADS`` above 1 it is the -fopenmp build (that of
    routines whose calls use threads)."""
    if not syntax.contraction_kernels or precision.is_half:
        return
    words = syntax.words(precision)
    try:
        omp = ("-fopenmp",) if threads_setting() > 1 else ()
    except BackendError:  # a malformed OCANNL_AST_THREADS: rendering reports it
        omp = ()
    flags = (*effective_flags(opt_flags), *omp, *syntax.compile_flags)
    for unit in kernel_objects(syntax, words):
        prebuild_object(cache_dir_default(), unit, flags)


# ---- compiling and loading ---------------------------------------------------------


def compile_c(
    prog: LoopProgram,
    syntax: CSyntax = C,
    *,
    opt_flags: Sequence[str] = DEFAULT_OPT_FLAGS,
    cache_dir: str | os.PathLike[str] | None = None,
    verify: bool = False,
) -> CRoutine:
    """Render `prog` in the dialect `syntax`, compile it (or reuse the cached shared object:
    the key covers the source, the flags, the compiler and the dialect) and load it.

    `OCANNL_AST_CFLAGS` (space-separated) overrides `opt_flags`. With `verify`, the program
    is verified first (`LoopIRError`): for a hand-built program; the pipeline verifies what
    it lowers (under ``OCANNL_AST_CHECK=1``), so the backend does not again.
    Example: ``compile_c(prog, opt_flags=("-O0",))``.
    """
    if verify:
        from ocannl_ast.lowering.loop_verify import verify_program

        verify_program(prog)
    rendered = _render(prog, syntax, jobs=cc_jobs(), kernel_apart=True)
    flags = (*effective_flags(opt_flags), *rendered.flags)
    directory = Path(cache_dir) if cache_dir is not None else cache_dir_default()
    dialect = syntax.fingerprint()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # gcc runs while cffi parses
        job = pool.submit(build_cached, rendered.cname, rendered.source, flags, directory,
                          dialect=dialect, extra_units=rendered.extra_units,
                          objects=rendered.objects)
        ffi = declare(rendered.cdef)
        entry = job.result()
    if not is_loaded(entry.so_path):
        try:
            load(entry.so_path, rendered.cdef, ffi)
        except OSError:  # verified yet not loadable (e.g. written by another gcc): rebuild
            entry = build_cached(rendered.cname, rendered.source, flags, entry.so_path.parent,
                                 dialect=dialect, rebuild=True,
                                 extra_units=rendered.extra_units, objects=rendered.objects)
            try:
                load(entry.so_path, rendered.cdef)
            except OSError as exc:
                raise BackendError(f"cannot load the routine {prog.name} from "
                                   f"{entry.so_path}: {exc}") from None
    ffi, lib = load(entry.so_path, rendered.cdef)
    library = LoadedLibrary(ffi, lib, rendered.cname, rendered.c_type, rendered.checks,
                            entry.c_path, entry.so_path)
    return CRoutine(prog, library)
