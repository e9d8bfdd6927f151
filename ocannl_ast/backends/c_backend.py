"""C backend: render the loop IR to C (in a `CSyntax` dialect), compile it with gcc
(`compiler`: flags and the verified disk cache), load and call it with cffi (`runtime`).

Stage: last. Input: a verified `LoopProgram`. Output: C source (`render_c`) and a callable
`CompiledRoutine` over NumPy arrays (`compile_c`), cached on disk by a hash of its inputs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import assert_never

from ocannl_ast.backends import c_reorder
from ocannl_ast.backends.c_contraction import KernelUse
from ocannl_ast.backends.c_syntax import ASCII_WORD, C, CSyntax, c_const, c_ident
from ocannl_ast.backends.c_uint4x32 import TYPE as U4
from ocannl_ast.backends.compiler import (
    DEFAULT_OPT_FLAGS,
    build_cached,
    cache_dir_default,
    effective_flags,
)
from ocannl_ast.backends.runtime import CompiledRoutine, LoadedLibrary, is_loaded, load
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering.loop_ir import (
    Binary,
    BinOp,
    Buffer,
    CheckIndex,
    Comment,
    Const,
    DeclLocal,
    Expr,
    Fill,
    ForLoop,
    Get,
    GetLocal,
    IndexExpr,
    LoopProgram,
    Noop,
    Seq,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
    Symbol,
    SymbolValue,
    Ternary,
    TernOp,
    ThreefryUniform,
    Unary,
    UnOp,
)

__all__ = ["DEFAULT_OPT_FLAGS", "CompiledRoutine", "c_const", "c_ident", "compile_c", "render_c"]


def _strip_outer(text: str) -> str:
    """Drop one pair of parentheses enclosing the whole expression."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for pos, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and pos < len(text) - 1:
            return text
    return text[1:-1]


@dataclass(slots=True)
class _Rendered:
    source: str  #: the translation unit
    cname: str  #: the C function's name
    c_type: str  #: the element type of its buffers
    cdef: str  #: its declaration, for cffi
    checks: dict[int, str] = field(default_factory=dict)  #: CheckIndex code -> description
    flags: tuple[str, ...] = ()  #: gcc flags the source needs (-fopenmp)


@dataclass(slots=True)
class _CRenderer:
    prog: LoopProgram
    syntax: CSyntax = C
    words: dict[str, str] = field(init=False)
    buffers: dict[Buffer, str] = field(default_factory=dict)
    symbols: dict[Symbol, str] = field(default_factory=dict)
    locals: dict[str, str] = field(default_factory=dict)
    helpers: set[str] = field(default_factory=set)
    threefry: bool = False
    checks: dict[int, str] = field(default_factory=dict)
    n_iters: int = 0
    #: contraction kernels (plain C only: `c_contraction`); None keeps every loop nest
    kernels: KernelUse | None = None
    #: hoist small reductions outside their output loops (plain C only: `c_reorder`)
    reorder: bool = False
    used_buffers: set[Buffer] = field(default_factory=set)  #: by the text rendered so far
    used_symbols: set[Symbol] = field(default_factory=set)
    checked: bool = False  #: whether that text has a CheckIndex (can return an error code)

    def __post_init__(self) -> None:
        if type(self.syntax) is CSyntax:
            self.kernels = KernelUse()
            self.reorder = c_reorder.enabled()
        self.words = self.syntax.words(self.prog.precision)
        taken: set[str] = set()
        for buf in self.prog.buffers:
            self.buffers[buf] = _unique(c_ident(buf.name), taken)
        for sym in self.prog.static_args:
            self.symbols[sym] = _unique("s_" + ASCII_WORD.sub("_", sym.name), taken)

    def sym(self, sym: Symbol) -> str:
        if sym not in self.symbols:
            raise BackendError(f"{self.prog.name}: symbol {sym.name}#{sym.id} is not bound")
        self.used_symbols.add(sym)
        return self.symbols[sym]

    def local(self, name: str) -> str:
        if name not in self.locals:
            # Always prefixed: a local must not shadow a buffer parameter of the same name.
            taken = set(self.locals.values())
            self.locals[name] = _unique("l_" + ASCII_WORD.sub("_", name), taken)
        return self.locals[name]

    def affine(self, terms: dict[Symbol, int], offset: int) -> str:
        """``4*i0 + i1 - 1``: integer (int64) C text of an affine combination."""
        parts: list[str] = []
        for sym, coeff in terms.items():
            if coeff != 0:
                name = self.sym(sym)
                term = name if abs(coeff) == 1 else f"{abs(coeff)}*{name}"
                sign = "-" if coeff < 0 else ("+" if parts else "")
                parts.append(f"{sign} {term}" if parts else f"{sign}{term}")
        if not parts:
            parts.append(str(offset))
        elif offset != 0:
            parts.append(f"{'-' if offset < 0 else '+'} {abs(offset)}")
        return " ".join(parts)

    def index(self, e: IndexExpr) -> str:
        terms: dict[Symbol, int] = {}
        for coeff, sym in e.terms:
            terms[sym] = terms.get(sym, 0) + coeff
        return self.affine(terms, e.offset)

    def cell(self, buf: Buffer, index: tuple[IndexExpr, ...]) -> str:
        """Row-major flat offset of a cell, folded into one affine expression."""
        if buf not in self.buffers:
            raise BackendError(f"{self.prog.name}: buffer {buf.name!r} is not a parameter")
        if len(index) != len(buf.dims):
            raise BackendError(f"{self.prog.name}: {len(index)} indices for {buf.name!r}")
        terms: dict[Symbol, int] = {}
        offset = 0
        for axis, e in enumerate(index):
            stride = math.prod(buf.dims[axis + 1 :])
            for coeff, sym in e.terms:
                terms[sym] = terms.get(sym, 0) + coeff * stride
            offset += e.offset * stride
        self.used_buffers.add(buf)
        name = f"(({U4}*){self.buffers[buf]})" if buf.uint4x32 else self.buffers[buf]
        return self.syntax.cell(name, self.affine(terms, offset))

    def op(self, op: UnOp | BinOp | TernOp, *args: str) -> str:
        text, helpers = self.syntax.op(op, self.words, args)
        self.helpers.update(helpers)
        return text

    def expr(self, e: Expr) -> str:
        match e:
            case Const(value=v):
                return self.syntax.const(v, self.prog.precision)
            case Get(buffer=buf, index=index):
                return self.cell(buf, index)
            case GetLocal(name=name):
                return self.local(name)
            case SymbolValue(symbol=sym):
                return self.syntax.cast(self.words["T"], self.sym(sym))
            case Unary(op=op, arg=arg):
                return self.op(op, self.num(arg))
            case Binary(op=BinOp.THREEFRY4X32, lhs=lhs, rhs=rhs):
                return self.op(BinOp.THREEFRY4X32, self.word(lhs), self.word(rhs))
            case Binary(op=op, lhs=lhs, rhs=rhs):
                return self.op(op, self.num(lhs), self.num(rhs))
            case Ternary(op=op, a=a, b=b, c=c):
                return self.op(op, self.num(a), self.num(b), self.num(c))
            case ThreefryUniform(key=key, counter=counter):
                self.threefry = True
                return self.syntax.uniform_call(self.words, key, self.index(counter))
            case _:
                assert_never(e)

    def value(self, e: Expr) -> str:
        return _strip_outer(self.num(e))

    def num(self, e: Expr) -> str:
        """`e` as a number of the routine's precision (a uint4x32 word gives its word 0)."""
        if not _is_word(e):
            return self.expr(e)
        self.helpers.add("u4")
        return f"ocannl_u4_to_{self.words['p']}({_strip_outer(self.expr(e))})"

    def word(self, e: Expr) -> str:
        """`e` as a uint4x32 word (a number gives its integer value in words 0 and 1)."""
        if _is_word(e):
            return self.expr(e)
        self.helpers.add("u4")
        return f"ocannl_to_u4_{self.words['p']}({_strip_outer(self.expr(e))})"

    def stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        pad = "  " * depth
        match s:
            case Noop():
                pass
            case Comment(text=text):
                out.extend(f"{pad}/* {ln.replace('*/', '* /')} */" for ln in text.splitlines())
            case Seq(stmts=stmts):
                self.seq(stmts, depth, out)
            case ForLoop(symbol=sym, extent=extent, body=body):
                self.for_loop(sym, extent, body, depth, out)
            case SetCell(buffer=buf, index=index, value=value):
                text = self.word(value) if buf.uint4x32 else self.value(value)
                out.append(f"{pad}{self.cell(buf, index)} = {_strip_outer(text)};")
            case SetFromVec(buffer=buf, vector=vec, value=value, length=n):
                self.helpers.update(("u4", "vec_uniform"))
                start = f"{n} * ({self.index(vec)})"
                total = math.prod(buf.dims)
                self.used_buffers.add(buf)
                out.append(f"{pad}ocannl_vec_uniform_{self.words['p']}({self.buffers[buf]} + "
                           f"{start}, {total} - {start}, {_strip_outer(self.word(value))});")
            case DeclLocal(name=name, init=init):
                out.append(f"{pad}{self.words['T']} {self.local(name)} = {self.value(init)};")
            case SetLocal(name=name, value=value):
                out.append(f"{pad}{self.local(name)} = {self.value(value)};")
            case Fill(buffer=buf, value=value):
                out.append(pad + self.fill(buf, value))
            case CheckIndex(index=index, bound=bound, code=code):
                idx = self.index(index)
                self.checks.setdefault(code, f"index {idx} must lie in [0, {bound})")
                self.checked = True
                out.append(pad + self.syntax.check(idx, bound, code))
            case _:
                assert_never(s)

    def seq(self, stmts: tuple[Stmt, ...], depth: int, out: list[str]) -> None:
        # A nested Seq that declares locals is a C block, so its locals stay inside it.
        for sub in stmts:
            if isinstance(sub, Seq) and any(isinstance(x, DeclLocal) for x in sub.stmts):
                out.append("  " * depth + "{")
                self.stmt(sub, depth + 1, out)
                out.append("  " * depth + "}")
            else:
                self.stmt(sub, depth, out)

    def for_loop(self, sym: Symbol, extent: int, body: Stmt, depth: int, out: list[str]) -> None:
        if self.kernels is not None and self.kernels.render(self, ForLoop(sym, extent, body),
                                                            depth, out):
            return
        if self.reorder and c_reorder.render(self, ForLoop(sym, extent, body), depth, out):
            return
        if sym not in self.symbols:
            self.symbols[sym] = f"i{self.n_iters}"
            self.n_iters += 1
        name = self.symbols[sym]
        out.append("  " * depth + self.syntax.for_header(name, extent))
        self.stmt(body, depth + 1, out)
        out.append("  " * depth + "}")

    def fill(self, buf: Buffer, value: float) -> str:
        name = self.buffers.get(buf)
        if name is None:
            raise BackendError(f"{self.prog.name}: buffer {buf.name!r} is not a parameter")
        self.used_buffers.add(buf)
        if buf.uint4x32:
            self.helpers.add("u4")
            word = f"ocannl_to_u4_{self.words['p']}({self.syntax.const(value, self.prog.precision)})"
            return self.syntax.fill(f"(({U4}*){name})", math.prod(buf.dims), word)
        return self.syntax.fill(name, math.prod(buf.dims), self.syntax.const(value, self.prog.precision))


def _is_word(e: Expr) -> bool:
    """Whether an expression is a uint4x32 word (a read of a uint4x32 buffer, threefry)."""
    match e:
        case Get(buffer=buf):
            return buf.uint4x32
        case Binary(op=op):
            return op is BinOp.THREEFRY4X32
        case _:
            return False


def _unique(name: str, taken: set[str]) -> str:
    out, k = name, 1
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    taken.add(out)
    return out


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


def _units(s: Stmt) -> list[Stmt]:
    """The top-level statements, nested blocks without locals flattened."""
    if isinstance(s, Seq) and not any(isinstance(x, DeclLocal) for x in s.stmts):
        return [u for x in s.stmts for u in _units(x)]
    return [s]


def _parts(r: _CRenderer, budget: int) -> list[_Part]:
    """The routine's body as a sequence of functions of about `budget` lines each."""
    units = _units(r.prog.body)
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
    r = _CRenderer(prog, syntax)
    parts = _parts(r, FUNCTION_LINES if budget is None else budget)
    cname = c_ident(prog.name, "ocannl_")
    t = r.words["T"]
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
    flags = r.kernels.flags() if r.kernels is not None else ()
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
    *,
    opt_flags: Sequence[str] = DEFAULT_OPT_FLAGS,
    cache_dir: str | os.PathLike[str] | None = None,
) -> CompiledRoutine:
    """Render, compile (or reuse the cached shared object) and load a routine.

    `OCANNL_AST_CFLAGS` (space-separated) overrides `opt_flags`; with `OCANNL_AST_CHECK=1`
    the program is verified first. Example: ``compile_c(prog, opt_flags=("-O0",))``.
    """
    if os.environ.get("OCANNL_AST_CHECK") == "1":
        from ocannl_ast.lowering.loop_verify import verify_program

        verify_program(prog)
    rendered = _render(prog)
    flags = (*effective_flags(opt_flags), *rendered.flags)
    directory = Path(cache_dir) if cache_dir is not None else cache_dir_default()
    entry = build_cached(rendered.cname, rendered.source, flags, directory)
    if not is_loaded(entry.so_path):
        try:
            load(entry.so_path, rendered.cdef)
        except OSError:  # verified yet not loadable (e.g. written by another gcc): rebuild
            entry = build_cached(rendered.cname, rendered.source, flags, entry.so_path.parent,
                                 rebuild=True)
            try:
                load(entry.so_path, rendered.cdef)
            except OSError as exc:
                raise BackendError(f"cannot load the routine {prog.name} from "
                                   f"{entry.so_path}: {exc}") from None
    ffi, lib = load(entry.so_path, rendered.cdef)
    library = LoadedLibrary(ffi, lib, rendered.cname, rendered.c_type, rendered.checks,
                            entry.c_path, entry.so_path)
    return CompiledRoutine(prog, library)
