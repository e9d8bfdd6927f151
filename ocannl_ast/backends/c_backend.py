"""C backend: render the loop IR to C (in a `CSyntax` dialect), compile it with gcc
(`compiler`: flags and the verified disk cache), load and call it with cffi (`runtime`).

Stage: last. Input: a verified `LoopProgram`. Output: C source (`render_c`) and a callable
`CompiledRoutine` over NumPy arrays (`compile_c`), cached on disk by a hash of its inputs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ocannl_ast.backends.c_renderer import CRenderer
from ocannl_ast.backends.c_syntax import C, CSyntax, Word, c_const, c_ident
from ocannl_ast.backends.compiler import (
    DEFAULT_OPT_FLAGS,
    build_cached,
    cache_dir_default,
    effective_flags,
)
from ocannl_ast.backends.protocol import CompiledRoutine
from ocannl_ast.backends.runtime import CRoutine, LoadedLibrary, is_loaded, load
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering import nests
from ocannl_ast.lowering.loop_ir import (
    Buffer,
    Comment,
    DeclLocal,
    LoopProgram,
    SetLocal,
    Symbol,
)

__all__ = ["DEFAULT_OPT_FLAGS", "CRoutine", "CompiledRoutine", "c_const", "c_ident",
           "compile_c", "render_c"]


@dataclass(slots=True)
class _Rendered:
    source: str  #: the translation unit
    cname: str  #: the C function's name
    c_type: str  #: the element type of its buffers
    cdef: str  #: its declaration, for cffi
    checks: dict[int, str] = field(default_factory=dict)  #: CheckIndex code -> description
    flags: tuple[str, ...] = ()  #: gcc flags the source needs (-fopenmp, the dialect's)


#: C lines per function of a routine: top-level statements are packed in order into
#: functions of about this size (a bigger statement gets a function of its own), which the
#: entry point calls in order. gcc's time grows faster than linearly in a function's size
#: (one function for a 64-layer MLP step: 14 s of gcc CPU time; parts of 48 lines: 1.3 s);
#: the calls cost nanoseconds.
FUNCTION_LINES = 48


@dataclass(frozen=True, slots=True)
class _Part:
    """A function of a routine: its body and the parameters it uses (in program order)."""

    body: tuple[str, ...]
    buffers: tuple[int, ...]  #: positions in `prog.buffers`
    statics: tuple[int, ...]  #: positions in `prog.static_args`
    checked: bool  #: can return an error code


def _parts(r: CRenderer, budget: int) -> list[_Part]:
    """The routine's body as a sequence of functions of about `budget` lines each."""
    units = nests.units(r.prog.body)
    if any(isinstance(u, DeclLocal | SetLocal) for u in units):
        units = [r.prog.body]  # routine-level locals: one function keeps them in scope
    parts: list[_Part] = []
    lines: list[str] = []
    bufs: set[Buffer] = set()
    syms: set[Symbol] = set()
    checked = False

    def close() -> None:
        b_pos = tuple(i for i, b in enumerate(r.prog.buffers) if b in bufs)
        s_pos = tuple(i for i, s in enumerate(r.prog.static_args) if s in syms)
        parts.append(_Part(tuple(lines), b_pos, s_pos, checked))
        lines.clear()
        bufs.clear()
        syms.clear()

    for u in units:
        r.used_buffers, r.used_symbols, r.checked = set(), set(), False
        unit: list[str] = []
        r.seq((u,), 1, unit)
        if lines and not isinstance(u, Comment) and len(lines) + len(unit) > budget:
            tail = _trailing_comments(lines)  # they go with the statement after them
            close()
            checked = False
            lines += tail
        lines += unit
        bufs.update(r.used_buffers)
        syms.update(r.used_symbols)
        checked = checked or r.checked
    if lines or not parts:
        close()
    return parts


def _trailing_comments(lines: list[str]) -> list[str]:
    """Remove and return the comment lines that end `lines`."""
    k = len(lines)
    while k > 0 and lines[k - 1].lstrip().startswith("/*") and lines[k - 1].endswith("*/"):
        k -= 1
    tail = lines[k:]
    del lines[k:]
    return tail


def _render(prog: LoopProgram, syntax: CSyntax = C, budget: int | None = None) -> _Rendered:
    r = CRenderer(prog, syntax)
    parts = _parts(r, FUNCTION_LINES if budget is None else budget)
    cname = c_ident(prog.name, "ocannl_")
    t = r.words[Word.STORAGE]  # the buffers' element type
    head = [f"/* ocannl_ast routine {prog.name} ({prog.precision.value}) */"]
    head += [*syntax.includes, ""]
    head += syntax.helper_defs(r.helpers, r.words)
    head += r.kernels.definitions(r.words) if r.kernels is not None else []
    if r.threefry:
        head += [*syntax.threefry(r.words), ""]
    entry = [syntax.entry_signature(cname, t)]
    if any(p.checked for p in parts):
        entry.append("  int rc;")
    for k, part in enumerate(parts):
        name = f"{cname}_f{k}"
        params = [syntax.buffer_param(t, r.buffers[prog.buffers[i]]) for i in part.buffers]
        params += [syntax.static_param(r.symbols[prog.static_args[i]]) for i in part.statics]
        head += [syntax.function_signature(name, params), *part.body, *syntax.epilogue(), ""]
        args = [f"bufs[{i}]" for i in part.buffers] + [f"statics[{i}]" for i in part.statics]
        call = f"{name}({', '.join(args)})"
        entry.append(f"  if ((rc = {call}) != 0) return rc;" if part.checked else f"  {call};")
    source = "\n".join([*head, *entry, *syntax.epilogue(), ""])
    flags = (*(r.kernels.flags() if r.kernels is not None else ()), *syntax.compile_flags)
    return _Rendered(source, cname, t, syntax.cdef(cname, t), r.checks, flags)


def render_c(prog: LoopProgram, syntax: CSyntax = C) -> str:
    """The translation unit of a routine in `syntax`: parts ``static int name_f0(T* restrict
    b..., int64_t s...)`` of about `FUNCTION_LINES` lines each, and the entry point
    ``int name(T* const* bufs, const int64_t* statics)`` calling them in order.
    Example: ``render_c(prog)`` starts with a comment, then the includes.
    """
    return _render(prog, syntax).source


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
    rendered = _render(prog, syntax)
    flags = (*effective_flags(opt_flags), *rendered.flags)
    directory = Path(cache_dir) if cache_dir is not None else cache_dir_default()
    dialect = syntax.fingerprint()
    entry = build_cached(rendered.cname, rendered.source, flags, directory, dialect=dialect)
    if not is_loaded(entry.so_path):
        try:
            load(entry.so_path, rendered.cdef)
        except OSError:  # verified yet not loadable (e.g. written by another gcc): rebuild
            entry = build_cached(rendered.cname, rendered.source, flags, entry.so_path.parent,
                                 dialect=dialect, rebuild=True)
            try:
                load(entry.so_path, rendered.cdef)
            except OSError as exc:
                raise BackendError(f"cannot load the routine {prog.name} from "
                                   f"{entry.so_path}: {exc}") from None
    ffi, lib = load(entry.so_path, rendered.cdef)
    library = LoadedLibrary(ffi, lib, rendered.cname, rendered.c_type, rendered.checks,
                            entry.c_path, entry.so_path)
    return CRoutine(prog, library)
