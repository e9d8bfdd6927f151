"""The C-style renderer: statements and expressions of the loop IR as text of a `CSyntax`
dialect, shared by every backend whose dialect subclasses `CSyntax`.

Stage: rendering. Input: a verified `LoopProgram` and a dialect. Output: lines of C-style
text per statement (`CRenderer.stmt`, `CRenderer.seq`), with what they need recorded on the
renderer (helpers, threefry, checks, the buffers and statics they use). The backends wrap
those lines: `c_backend` into functions and an entry point, `cuda_backend` into kernels.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import assert_never

from ocannl_ast.backends import c_coalesce, c_lanes, c_reorder
from ocannl_ast.backends.c_coalesce import has_loop
from ocannl_ast.backends.c_contraction import KernelUse
from ocannl_ast.backends.c_contraction_match import flat
from ocannl_ast.backends.c_syntax import ASCII_WORD, C, CSyntax, Word, c_ident
from ocannl_ast.backends.c_uint4x32 import TYPE as U4
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
    Precision,
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
    storage,
)
from ocannl_ast.lowering.walk import reads, writes

__all__ = ["CRenderer", "has_loop", "is_word", "strip_outer", "unique_name"]


_PARENS = re.compile(r"[()]")


def strip_outer(text: str) -> str:
    """Drop one pair of parentheses enclosing the whole expression: ``(a + b)`` -> ``a + b``,
    while ``(a) + (b)`` stays."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    inner = text[1:-1]
    if ")" not in inner:
        return inner
    # the first "(" closes early iff some prefix of `inner` closes more than it opens: its
    # parentheses less every "()" pair (repeatedly) start with ")" (C-level work: hot path)
    rest = "".join(_PARENS.findall(inner))
    while "()" in rest:
        rest = rest.replace("()", "")
    return text if rest.startswith(")") else inner


def unique_name(name: str, taken: set[str]) -> str:
    """`name`, or ``name_1``, ``name_2``, ... : the first not in `taken` (then added to it)."""
    out, k = name, 1
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    taken.add(out)
    return out


def is_word(e: Expr) -> bool:
    """Whether an expression is a uint4x32 word (a read of a uint4x32 buffer, threefry)."""
    match e:
        case Get(buffer=buf):
            return buf.uint4x32
        case Binary(op=op):
            return op is BinOp.THREEFRY4X32
        case _:
            return False


@dataclass(slots=True)
class CRenderer:
    """Renders the statements and expressions of one routine in a C-style dialect.

    The public renderer every dialect builds on: `c_backend` packs its output into C
    functions, `cuda_backend` into kernels. Names are fixed on construction: buffers get
    `c_ident` names (renamed ``b_<name>`` when in `syntax.reserved_names`), static
    arguments ``s_<name>``; loop counters are ``i0, i1, ...`` in the order loops are
    rendered. The renderer records what the text rendered so far needs: `helpers`,
    `threefry`, `checks`, and (reset by the caller per unit) `used_buffers`, `used_symbols`,
    `checked`. Example: ``r = CRenderer(prog); r.stmt(prog.body, 1, lines)``.
    """

    prog: LoopProgram
    syntax: CSyntax = C
    words: dict[str, str] = field(init=False)  #: `Word` -> text for the precision
    buffers: dict[Buffer, str] = field(default_factory=dict)  #: C names of the parameters
    symbols: dict[Symbol, str] = field(default_factory=dict)  #: C names of statics, counters
    locals: dict[str, str] = field(default_factory=dict)
    helpers: set[str] = field(default_factory=set)  #: helper definitions the text calls
    threefry: bool = False  #: the text calls the threefry uniform generator
    checks: dict[int, str] = field(default_factory=dict)  #: CheckIndex code -> description
    n_iters: int = 0  #: loop counters named so far
    #: contraction kernels (`syntax.contraction_kernels`: `c_contraction`); None keeps
    #: every loop nest
    kernels: KernelUse | None = None
    #: hoist small reductions outside their output loops (`syntax.reorder_loops`)
    reorder: bool = False
    #: sum long innermost reduction loops in lanes (`c_lanes`; the same capability)
    lanes: bool = False
    #: the C names (hashed in C: a hot path) of the buffers, statics and loop counters
    used_buffers: set[str] = field(default_factory=set)  #: the text rendered so far uses
    used_symbols: set[str] = field(default_factory=set)
    checked: bool = False  #: whether that text has a CheckIndex (can return an error code)
    #: buffers stored other than the routine's precision (`Buffer.precision`): a nest
    #: touching one runs as plain converting loops (no contraction kernel, no reordering)
    foreign: frozenset[Buffer] = frozenset()
    #: the team size when rendering for the routine's one OpenMP parallel region (`c_backend`):
    #: parallel loops and threaded kernel calls at the top of a part are then shared out by
    #: worksharing loops of that team (``omp for``) instead of forking their own; 0: not so
    team: int = 0
    team_units: int = 0  #: top-level statements rendered so far for the whole team
    in_parallel: bool = False  #: rendering the body of a parallel loop (no kernel calls)
    #: when a list: the constant term of each program buffer's cell index is rendered as a
    #: mark (`c_dedup.MARK`) and recorded here as (the buffer's C name, the offset), so
    #: that nests differing only in where their cells lie can share one function
    offset_marks: list[tuple[str, int]] | None = None
    param_names: frozenset[str] = frozenset()  #: C names of the program's buffers
    plain_cell: bool = False  #: the dialect's cells are `CSyntax.cell`'s (`cell` inlines it)
    #: names of parameters, statics and local arrays, for `fresh` (made on its first call)
    fresh_taken: set[str] | None = None
    fresh_next: dict[str, int] = field(default_factory=dict)  #: stem -> next k to try
    #: loads and stores of the routine's precision convert nothing (float32, float64 cells,
    #: the dialect's own `CSyntax.load` and `store`): the renderer skips asking
    plain: bool = False
    buffer_types: dict[Buffer, str] = field(default_factory=dict)  #: `buffer_type`'s answers
    #: `syntax.op_template` of each op used so far, by the op's id (None: the dialect
    #: overrides `CSyntax.op`, which is then asked each time)
    op_templates: dict[int, tuple[str, tuple[str, ...]]] | None = None
    coalesce: bool = False  #: run perfect row-major nests as one loop (`c_coalesce`)
    #: loop counters coalesced into an inner one: no term of theirs is written (`affine`)
    absorbed: set[Symbol] = field(default_factory=set)
    #: set by a loop for the loop it may coalesce with, its body (`c_coalesce.mergeable`):
    #: (that inner loop, the outer counter and extent, the position of its header in `out`)
    merging: tuple[ForLoop, Symbol, int, int] | None = None

    def __post_init__(self) -> None:
        self.foreign = frozenset(b for b in self.prog.buffers
                                 if storage(b, self.prog.precision) is not self.prog.precision)
        half = self.prog.precision.is_half  # 16-bit cells: plain loops convert each access
        if self.syntax.contraction_kernels and not half:
            self.kernels = KernelUse()
        self.reorder = self.syntax.reorder_loops and c_reorder.enabled() and not half
        self.lanes = self.syntax.reorder_loops and c_lanes.enabled() and not half
        self.coalesce = self.syntax.reorder_loops
        self.words = self.syntax.words(self.prog.precision)
        syntax_type = type(self.syntax)
        if syntax_type.op is CSyntax.op:
            self.op_templates = {}
        self.plain = (self.prog.precision in (Precision.FLOAT32, Precision.FLOAT64)
                      and syntax_type.load is CSyntax.load
                      and syntax_type.store is CSyntax.store)
        taken: set[str] = set()
        for buf in self.prog.buffers:
            self.buffers[buf] = unique_name(c_ident(buf.name), taken)
        for sym in self.prog.static_args:
            self.symbols[sym] = unique_name("s_" + ASCII_WORD.sub("_", sym.name), taken)
        for buf, name in list(self.buffers.items()):
            if name in self.syntax.reserved_names:
                self.buffers[buf] = unique_name("b_" + name, taken)
        self.param_names = frozenset(self.buffers[b] for b in self.prog.buffers)
        self.plain_cell = syntax_type.cell is CSyntax.cell

    def sym(self, sym: Symbol) -> str:
        """The C name of a static argument or loop counter already named."""
        if (name := self.symbols.get(sym)) is None:
            raise BackendError(f"{self.prog.name}: symbol {sym.name}#{sym.id} is not bound")
        self.used_symbols.add(name)
        return name

    def fresh(self, stem: str) -> str:
        """``<stem><k>``, the smallest k naming no buffer, local array or symbol yet: a
        local array's name (`c_lanes`, `c_reorder`), which the caller adds to `buffers`.
        The names taken only grow (arrays are never renamed; counters are ``i<n>``), so
        the search goes on from the last name given."""
        taken = self.fresh_taken
        if taken is None:
            taken = self.fresh_taken = set(self.buffers.values()) | set(self.symbols.values())
        k = self.fresh_next.get(stem, 0)
        while f"{stem}{k}" in taken:
            k += 1
        name = f"{stem}{k}"
        taken.add(name)
        self.fresh_next[stem] = k + 1
        return name

    def local(self, name: str) -> str:
        """The C name of a scalar local (``l_<name>``)."""
        if name not in self.locals:
            # Always prefixed: a local must not shadow a buffer parameter of the same name.
            taken = set(self.locals.values())
            self.locals[name] = unique_name("l_" + ASCII_WORD.sub("_", name), taken)
        return self.locals[name]

    def affine(self, terms: dict[Symbol, int], offset: int) -> str:
        """``4*i0 + i1 - 1``: integer (int64) C text of an affine combination."""
        parts: list[str] = []
        symbols, used, absorbed = self.symbols, self.used_symbols, self.absorbed
        for sym, coeff in terms.items():
            if coeff != 0 and not (absorbed and sym in absorbed):
                name = symbols.get(sym)
                if name is None:
                    name = self.sym(sym)  # raises
                used.add(name)
                term = name if coeff == 1 or coeff == -1 else f"{abs(coeff)}*{name}"
                if parts:
                    parts.append(f"- {term}" if coeff < 0 else f"+ {term}")
                else:
                    parts.append(f"-{term}" if coeff < 0 else term)
        if not parts:
            return str(offset)
        if offset != 0:
            parts.append(f"- {-offset}" if offset < 0 else f"+ {offset}")
        return " ".join(parts)

    def index(self, e: IndexExpr) -> str:
        """An index expression as integer C text."""
        terms: dict[Symbol, int] = {}
        for coeff, sym in e.terms:
            terms[sym] = terms.get(sym, 0) + coeff
        return self.affine(terms, e.offset)

    def cell(self, buf: Buffer, index: tuple[IndexExpr, ...]) -> str:
        """Row-major flat offset of a cell, folded into one affine expression."""
        name = self.buffers.get(buf)
        if name is None:
            raise BackendError(f"{self.prog.name}: buffer {buf.name!r} is not a parameter")
        dims = buf.dims
        if len(index) != len(dims):
            raise BackendError(f"{self.prog.name}: {len(index)} indices for {buf.name!r}")
        terms, offset = flat(dims, index)
        self.used_buffers.add(name)
        marks = self.offset_marks
        if marks is None or name not in self.param_names:
            text = self.affine(terms, offset)
        else:  # the marked form: `c_dedup.literal` turns it back into `affine(terms, offset)`
            mark = f"\x01{len(marks)}\x01"
            marks.append((name, offset))
            lead = self.affine(terms, 0) if any(terms.values()) else ""
            text = f"{lead} + {mark}" if lead else mark
        name = f"(({U4}*){name})" if buf.uint4x32 else name
        return f"{name}[{text}]" if self.plain_cell else self.syntax.cell(name, text)

    def op(self, op: UnOp | BinOp | TernOp, *args: str) -> str:
        """The dialect's text of `op` on `args`, recording the helpers it calls."""
        templates = self.op_templates
        if templates is None:  # the dialect spells `op` its own way
            text, helpers = self.syntax.op(op, self.words, args)
            self.helpers.update(helpers)
            return text
        found = templates.get(id(op))  # (an enum member: hashed by id, not its name)
        if found is None:
            found = templates[id(op)] = self.syntax.op_template(op, self.words)
        self.helpers.update(found[1])
        return found[0].format(*args, **self.words)

    def expr(self, e: Expr) -> str:
        """The C text of an expression (a number, or a uint4x32 word where `is_word`)."""
        match e:
            # (the cases in order of frequency: the node kinds are disjoint)
            case Get(buffer=buf, index=index):
                if buf.uint4x32 or (self.plain and buf.precision in (None, Precision.COMPUTE)):
                    return self.cell(buf, index)  # stored as computed: no conversion
                return self.converted(self.syntax.load(
                    storage(buf, self.prog.precision), self.cell(buf, index),
                    self.prog.precision.compute))
            case Binary(op=BinOp.THREEFRY4X32, lhs=lhs, rhs=rhs):
                return self.op(BinOp.THREEFRY4X32, self.word(lhs), self.word(rhs))
            case Binary(op=op, lhs=lhs, rhs=rhs):
                return self.op(op, self.num(lhs), self.num(rhs))
            case Const(value=v):
                return self.syntax.const(v, self.prog.precision)
            case GetLocal(name=name):
                return self.local(name)
            case Unary(op=op, arg=arg):
                return self.op(op, self.num(arg))
            case SymbolValue(symbol=sym):
                return self.syntax.cast(self.words[Word.TYPE], self.sym(sym))
            case Ternary(op=op, a=a, b=b, c=c):
                return self.op(op, self.num(a), self.num(b), self.num(c))
            case ThreefryUniform(key=key, counter=counter):
                self.threefry = True
                return self.syntax.uniform_call(self.words, key, self.index(counter))
            case _:
                assert_never(e)

    def value(self, e: Expr) -> str:
        """`num` without enclosing parentheses (a right-hand side)."""
        return strip_outer(self.num(e))

    def num(self, e: Expr) -> str:
        """`e` as a number of the routine's precision (a uint4x32 word gives its word 0)."""
        cls = e.__class__  # `is_word`, inline (a hot path)
        if not ((cls is Get and e.buffer.uint4x32)  # type: ignore[union-attr]
                or (cls is Binary and e.op is BinOp.THREEFRY4X32)):  # type: ignore[union-attr]
            return self.expr(e)
        self.helpers.add("u4")
        return f"ocannl_u4_to_{self.words[Word.SUFFIX]}({strip_outer(self.expr(e))})"

    def word(self, e: Expr) -> str:
        """`e` as a uint4x32 word (a number gives its integer value in words 0 and 1)."""
        if is_word(e):
            return self.expr(e)
        self.helpers.add("u4")
        return f"ocannl_to_u4_{self.words[Word.SUFFIX]}({strip_outer(self.expr(e))})"

    def stmt(self, s: Stmt, depth: int, out: list[str]) -> None:
        """Append the lines of `s`, indented by `depth` levels, to `out`."""
        pad = "  " * depth
        match s:  # (the cases in order of frequency: the node kinds are disjoint)
            case SetCell(buffer=buf, index=index, value=value):
                if buf.uint4x32:
                    text = self.word(value)
                elif self.plain and buf.precision in (None, Precision.COMPUTE):
                    text = self.value(value)  # stored as computed: no conversion
                else:
                    text = self.converted(self.syntax.store(self.storage(buf),
                                                            self.value(value)))
                out.append(f"{pad}{self.cell(buf, index)} = {strip_outer(text)};")
            case ForLoop(symbol=sym, extent=extent, body=body, threads=th):
                self.for_loop(sym, extent, body, depth, out, th, s)
            case Seq(stmts=stmts):
                self.seq(stmts, depth, out)
            case Comment(text=text):
                out.extend(f"{pad}/* {ln.replace('*/', '* /')} */" for ln in text.splitlines())
            case Noop():
                pass
            case SetFromVec(buffer=buf, vector=vec, value=value, length=n):
                self.helpers.update(("u4", "vec_uniform"))
                start = f"{n} * ({self.index(vec)})"
                total = math.prod(buf.dims)
                self.used_buffers.add(self.buffers[buf])
                fn = f"ocannl_vec_uniform_{self.words[Word.SUFFIX]}"
                if self.storage(buf) is not self.prog.precision.compute:
                    out.extend(self.half_from_vec(buf, start, total, n, value, pad))
                    return
                out.append(f"{pad}{fn}({self.buffers[buf]} + {start}, {total} - {start}, "
                           f"{strip_outer(self.word(value))});")
            case DeclLocal(name=name, init=init):
                t = self.words[Word.TYPE]
                out.append(f"{pad}{t} {self.local(name)} = {self.value(init)};")
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
        """Append the lines of `stmts` in order (a unit list of a part or kernel body)."""
        # A nested Seq that declares locals is a C block, so its locals stay inside it.
        for sub in stmts:
            if isinstance(sub, Seq) and any(isinstance(x, DeclLocal) for x in sub.stmts):
                out.append("  " * depth + "{")
                self.stmt(sub, depth + 1, out)
                out.append("  " * depth + "}")
            else:
                self.stmt(sub, depth, out)

    def for_loop(self, sym: Symbol, extent: int, body: Stmt, depth: int, out: list[str],
                 threads: int = 1, node: ForLoop | None = None) -> None:
        """A loop: a contraction kernel call or a reordered nest where the dialect allows
        and they apply, else a plain ``for`` (after `syntax.inner_loop_pragma` if innermost).
        A loop marked for `threads` > 1 runs on OpenMP threads where the dialect has the C
        backend's kernels (then compiled with -fopenmp): its own parallel loop, or with
        `team` a worksharing loop of the routine's region. It stays serial where the kernel
        takes one of its inner loops (a kernel call sums with other roundings than the loop
        it replaces; the same nest must give the same bits at any thread count). `node`:
        the loop itself, when the caller has it (its facts are then memoized by identity).
        """
        merge, self.merging = self.merging, None  # (offered by the loop around this one)
        loop = node if node is not None else ForLoop(sym, extent, body, threads)
        # a nest converting storage runs as plain loops (no kernel, reordering, lanes, threads)
        plain = bool(self.foreign) and not self.foreign.isdisjoint(reads(body) | writes(body))
        kernels = None if self.in_parallel or plain else self.kernels
        if kernels is not None and kernels.render(self, loop, depth, out):
            return
        par = (threads > 1 and kernels is not None and (not self.team or depth == 1)
               and not kernels.takes_inner(self, loop))
        # a parallel loop's own body may still be reordered (the same bits: c_reorder)
        if not par and not plain and self.reorder and c_reorder.render(self, loop, depth, out,
                                                                       self.lanes):
            return
        if not par and not plain and self.lanes and c_lanes.render(self, loop, depth, out):
            return
        if merge is not None and merge[0] is loop and not par:
            c_coalesce.render(self, loop, merge[1:], depth, out)
            return
        if sym not in self.symbols:
            self.symbols[sym] = f"i{self.n_iters}"
            self.n_iters += 1
        name = self.symbols[sym]
        if par and kernels is not None:
            kernels.parallel = True  # its flags() then add -fopenmp
            self.team_units += bool(self.team)
            out.append("  " * depth + ("#pragma omp for schedule(static)" if self.team else
                                       f"#pragma omp parallel for num_threads({threads}) "
                                       "schedule(static)"))
        elif not has_loop(body):
            out += self.pragmas(extent, body, depth)
        out.append("  " * depth + self.syntax.for_header(name, extent))
        if self.coalesce and not par:
            c_coalesce.offer(self, loop, extent, len(out) - 1)
        outer, self.in_parallel = self.in_parallel, self.in_parallel or par
        self.stmt(body, depth + 1, out)
        self.in_parallel = outer
        out.append("  " * depth + "}")

    def pragmas(self, extent: int, body: Stmt, depth: int) -> list[str]:
        """The lines before an innermost plain loop (`CSyntax.tiny_loop_pragma`,
        `CSyntax.inner_loop_pragma`)."""
        lines = []
        if (extent <= self.syntax.tiny_loop and self.syntax.tiny_loop_pragma
                and not writes(body)):  # a short sum into a local (no cell written)
            lines.append("  " * depth + self.syntax.tiny_loop_pragma.format(n=extent))
        if self.syntax.inner_loop_pragma:
            lines.append("  " * depth + self.syntax.inner_loop_pragma)
        return lines

    def fill(self, buf: Buffer, value: float) -> str:
        """The statement setting every cell of `buf` to `value`."""
        name = self.buffers.get(buf)
        if name is None:
            raise BackendError(f"{self.prog.name}: buffer {buf.name!r} is not a parameter")
        self.used_buffers.add(name)
        text = self.syntax.const(value, self.prog.precision)
        if not buf.uint4x32:
            text = self.converted(self.syntax.store(self.storage(buf), text))
        if buf.uint4x32:
            self.helpers.add("u4")
            word = f"ocannl_to_u4_{self.words[Word.SUFFIX]}({text})"
            return self.syntax.fill(f"(({U4}*){name})", math.prod(buf.dims), word)
        return self.syntax.fill(name, math.prod(buf.dims), text)

    def storage(self, buf: Buffer) -> Precision:
        """How `buf`'s cells are stored in this routine."""
        return storage(buf, self.prog.precision)

    def buffer_type(self, buf: Buffer) -> str:
        """The C element type of `buf`'s parameter."""
        text = self.buffer_types.get(buf)
        if text is None:
            text = self.buffer_types[buf] = (
                self.words[Word.STORAGE] if buf.uint4x32
                else self.syntax.storage_type(self.storage(buf)))
        return text

    def converted(self, text_helper: tuple[str, str | None]) -> str:
        """The text of a load or store conversion (`CSyntax.load`), recording its helper."""
        text, helper = text_helper
        if helper is not None:
            self.helpers.add(helper)
        return text

    def half_from_vec(self, buf: Buffer, start: str, total: int, n: int, value: Expr,
                      pad: str) -> list[str]:
        """`SetFromVec` into 16-bit cells: the uniforms into compute-precision locals, then
        each stored (rounded)."""
        t, fn = self.words[Word.TYPE], f"ocannl_vec_uniform_{self.words[Word.SUFFIX]}"
        cell = self.converted(self.syntax.store(self.storage(buf), "ocannl_v[ocannl_j]"))
        name = self.buffers[buf]
        return [f"{pad}{{", f"{pad}  {t} ocannl_v[{n}];",
                f"{pad}  {self.syntax.index_type} ocannl_s = {start};",
                f"{pad}  {fn}(ocannl_v, {total} - ocannl_s, {strip_outer(self.word(value))});",
                f"{pad}  {self.syntax.for_header('ocannl_j', n)[:-2]}",
                f"{pad}    if (ocannl_j < {total} - ocannl_s) {name}[ocannl_s + ocannl_j] = {cell};",
                f"{pad}}}"]
