"""CUDA backend, rendering: split a routine's loop IR into kernels and spell them in the
`CudaSyntax` dialect with the public C-style renderer (`c_renderer.CRenderer`).

Stage: last. Input: a verified `LoopProgram`. Output: one CUDA C++ translation unit
(`render_cuda`) and the launch plan of its kernels (`plan_cuda`). The top-level statements
run in order, one kernel each: a loop nest maps its outer independent loops (each writes a
different cell per iteration and reads written cells only at the cell it writes) to one
grid-stride loop over their flattened iteration space, and runs the rest (reductions
included) inside each thread (a large reduction: a register tile of cells a thread,
`cuda_tile`; a large contraction of two factors: tiles of cells a block, through shared
memory, `cuda_gemm`; a long reduction into few cells: a block a few cells, `cuda_reduce`);
a fill runs one thread per cell; anything else (scalar
statements, blocks with locals) runs in one thread, consecutive ones in one kernel. Checks
of static arguments run on the host before any launch.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ocannl_ast.backends import cuda_gemm, cuda_reduce, cuda_tile
from ocannl_ast.backends.c_renderer import CRenderer
from ocannl_ast.backends.c_syntax import c_ident
from ocannl_ast.backends.cuda_syntax import CUDA, THREAD, CudaSyntax
from ocannl_ast.lowering import nests
from ocannl_ast.lowering.loop_ir import (
    Buffer,
    CheckIndex,
    Comment,
    DeclLocal,
    Fill,
    ForLoop,
    IndexExpr,
    LoopProgram,
    Noop,
    SetCell,
    SetFromVec,
    SetLocal,
    Stmt,
    Symbol,
)
from ocannl_ast.lowering.walk import Loop, own_symbols, reads, stmt_gets, stmt_nodes, writes

THREADS_PER_BLOCK = 256
MAX_BLOCKS = 1 << 16


@dataclass(frozen=True, slots=True)
class Kernel:
    """One launch: its name, which routine buffers and static arguments it takes (positions
    in the program's parameter lists, in order) and how many threads it needs."""

    name: str
    buffers: tuple[int, ...]
    statics: tuple[int, ...]  #: read from the device array of static arguments
    threads: int  #: 1 for a serial kernel; else the flattened independent iterations

    def grid(self) -> tuple[int, int]:
        """(blocks, threads per block) of the launch."""
        per_block = min(THREADS_PER_BLOCK, self.threads)
        return min(-(-self.threads // per_block), MAX_BLOCKS), per_block


@dataclass(frozen=True, slots=True)
class HostCheck:
    """A `CheckIndex` over static arguments only, evaluated before launching anything."""

    terms: tuple[tuple[int, int], ...]  #: (coefficient, static argument position)
    offset: int
    bound: int
    code: int


@dataclass(frozen=True, slots=True)
class CudaPlan:
    """A rendered routine: its source and the kernels to launch, in order. `source` is
    `head` followed by `units` (the text of each kernel, in order)."""

    source: str
    cname: str
    kernels: tuple[Kernel, ...]
    host_checks: tuple[HostCheck, ...]
    checks: dict[int, str]  #: error code -> description (host and device checks)
    head: str = ""
    units: tuple[str, ...] = ()

    def part_sources(self, parts: int) -> list[tuple[str, range]]:
        """At most `parts` translation units of consecutive kernels (each with the head),
        balanced by lines of code, and which kernels each holds; one unit is `source`."""
        n = len(self.units)
        parts = max(1, min(parts, n))
        if parts == 1:
            return [(self.source, range(n))]
        weights = [_code_lines(u) for u in self.units]
        total = sum(weights)
        out: list[tuple[str, range]] = []
        lo, acc = 0, 0
        for k in range(n):
            acc += weights[k]
            left = parts - len(out) - 1  # parts still to start after this one
            if left and (acc * parts >= total * (len(out) + 1) or n - k - 1 == left):
                out.append((self._unit_source(lo, k + 1), range(lo, k + 1)))
                lo = k + 1
        out.append((self._unit_source(lo, n), range(lo, n)))
        return out

    def _unit_source(self, lo: int, hi: int) -> str:
        return (self.head + "".join(self.units[lo:hi])).rstrip("\n") + "\n"


#: What NVRTC spends on a kernel beyond its lines of code, in lines (measured for sm_90:
#: about 40 ms a kernel of ten lines).
KERNEL_WEIGHT = 8


def _code_lines(text: str) -> int:
    """A kernel text's weight: `KERNEL_WEIGHT` plus its lines of code (not comments)."""
    return KERNEL_WEIGHT + sum(1 for ln in text.splitlines() if ln and not ln.startswith("/*"))


# ---- uses and independence ----------------------------------------------------------


@dataclass(slots=True)
class _Uses:
    """What a statement uses: its buffers, symbols, reads (with their indices), the
    indices each buffer is written at, and whether it fills or vector-writes a buffer."""

    bufs: set[Buffer]
    syms: set[Symbol]
    reads: list[tuple[Buffer, tuple[IndexExpr, ...]]]
    writes: dict[Buffer, set[tuple[IndexExpr, ...]]]
    fills: bool = False

    @staticmethod
    def of(s: Stmt) -> _Uses:
        nodes = list(stmt_nodes(s))
        written: dict[Buffer, set[tuple[IndexExpr, ...]]] = {}
        for x in nodes:
            if isinstance(x, SetCell):
                written.setdefault(x.buffer, set()).add(x.index)
        return _Uses(set(reads(s) | writes(s)),
                     {sym for x in nodes for sym in own_symbols(x)},
                     [(g.buffer, g.index) for g in stmt_gets(s)], written,
                     # a fill or vector write: kept serial
                     any(isinstance(x, Fill | SetFromVec) for x in nodes))


def _independent(outer: tuple[Symbol, ...], body: Stmt) -> bool:
    """Whether the iterations of the `outer` loops around `body` may run in any order at
    once: every buffer is written at one index in which each outer symbol is alone on some
    axis (distinct iterations, distinct cells), and read, if written, only at that index."""
    uses = _Uses.of(body)
    if uses.fills:
        return False
    for indices in uses.writes.values():
        if len(indices) != 1:
            return False
        (index,) = indices
        alone = {ix.terms[0][1] for ix in index if len(ix.terms) == 1}
        if not set(outer) <= alone:
            return False
    return all(index in uses.writes[buf] for buf, index in uses.reads if buf in uses.writes)


# ---- rendering ----------------------------------------------------------------------


@dataclass(slots=True)
class _KernelWriter:
    prog: LoopProgram
    r: CRenderer
    syntax: CudaSyntax
    cname: str
    lines: list[str]
    kernels: list[Kernel]
    comments: list[str]
    starts: list[int]  #: where each kernel's lines start in `lines`

    def emit(self, units: list[Stmt], threads: int, body: list[str]) -> None:
        """A kernel over the buffers and static arguments `units` use, with `body`."""
        bufs: set[Buffer] = set()
        syms: set[Symbol] = set()
        for u in units:
            uses = _Uses.of(u)
            bufs |= uses.bufs
            syms |= uses.syms
        b_pos = tuple(i for i, b in enumerate(self.prog.buffers) if b in bufs)
        s_pos = tuple(i for i, s in enumerate(self.prog.static_args) if s in syms)
        syntax, bufs_ = self.syntax, self.prog.buffers
        params = [syntax.buffer_param(self.r.buffer_type(bufs_[i]), self.r.buffers[bufs_[i]])
                  for i in b_pos]
        if s_pos:
            params.append(syntax.statics_param())
        reads = [syntax.static_read(self.r.symbols[self.prog.static_args[i]], i) for i in s_pos]
        name = f"{self.cname}_k{len(self.kernels)}"
        what = "1 thread" if threads == 1 else f"{threads} threads"
        self.starts.append(len(self.lines))
        self.lines += [f"/* kernel {len(self.kernels)}: {what} */", *self.comments]
        self.comments.clear()
        self.lines += [syntax.signature(name, params), *reads, *body, *syntax.epilogue(), ""]
        self.kernels.append(Kernel(name, b_pos, s_pos, threads))

    def serial(self, units: list[Stmt]) -> None:
        if units:
            body: list[str] = []
            self.r.seq(tuple(units), 1, body)
            self.emit(units, 1, body)

    def fill(self, unit: Fill) -> None:
        size = math.prod(unit.buffer.dims)
        value = self.r.converted(self.syntax.store(
            self.r.storage(unit.buffer), self.syntax.const(unit.value, self.prog.precision)))
        line = f"    {self.r.buffers[unit.buffer]}[{THREAD}] = {value};"
        self.emit([unit], size, [f"  {self.syntax.grid_stride(size)}", line, "  }"])

    def nest(self, unit: Stmt, loops: list[Loop], inner: Stmt) -> None:
        """`unit`'s independent outer `loops` as one grid-stride loop around `inner`."""
        if math.prod(n for _, n in loops) == 0:  # a zero-size axis: the nest runs nothing
            return  # (and a grid of 0 is invalid)
        gemm = cuda_gemm.plan(unit, loops, frozenset(self.prog.static_args), self.r)
        if gemm is not None:
            threads, body = cuda_gemm.render(gemm, self.r)
            self.emit([unit], threads, body)
            return
        red = cuda_reduce.plan(unit, loops)
        if red is not None:
            threads, body = cuda_reduce.render(red, self.r)
            self.emit([unit], threads, body)
            return
        tile = cuda_tile.plan(loops, inner)
        extents = tile.extents(loops) if tile is not None else [n for _, n in loops]
        total = math.prod(extents)
        body = [f"  {self.syntax.grid_stride(total)}"]
        stride = total
        coords: list[str] = []
        for pos, (sym, extent) in enumerate(zip([s for s, _ in loops], extents, strict=True)):
            if tile is not None and pos in (tile.rows, tile.cols):
                name = self.r.fresh(f"{self.r.symbols.get(sym) or 'i'}t")  # a tile number
            else:
                name = self.r.symbols.get(sym) or f"i{self.r.n_iters}"
                if sym not in self.r.symbols:
                    self.r.symbols[sym], self.r.n_iters = name, self.r.n_iters + 1
            coords.append(name)
            stride //= extent
            value = THREAD if stride == 1 else f"{THREAD} / {stride}"
            if pos > 0:
                value = f"({value}) % {extent}" if stride != 1 else f"{value} % {extent}"
            body.append(f"    const {self.syntax.index_type} {name} = {value};")
        if tile is not None:
            body += cuda_tile.render(tile, self.r, loops, coords, 2)
        else:
            self.r.stmt(inner, 2, body)
        self.emit([unit], total, [*body, "  }"])


def _host_check(prog: LoopProgram, s: Stmt) -> HostCheck | None:
    if not isinstance(s, CheckIndex):
        return None
    pos = {sym: i for i, sym in enumerate(prog.static_args)}
    if not all(sym in pos for _, sym in s.index.terms):
        return None
    terms = tuple((c, pos[sym]) for c, sym in s.index.terms)
    return HostCheck(terms, s.index.offset, s.bound, s.code)


def plan_cuda(prog: LoopProgram, syntax: CudaSyntax = CUDA) -> CudaPlan:
    """Render `prog` as kernels (see the module docstring) and the plan to launch them."""
    r = CRenderer(prog, syntax)
    cname = c_ident(prog.name, "ocannl_")
    w = _KernelWriter(prog, r, syntax, cname, [], [], [], [])
    units = nests.units(prog.body)
    if any(isinstance(u, DeclLocal | SetLocal) for u in units):
        units = [prog.body]  # routine-level locals: one serial kernel keeps them in scope
    host: list[HostCheck] = []
    serial: list[Stmt] = []
    for u in units:
        check = _host_check(prog, u)
        if check is not None and isinstance(u, CheckIndex):
            host.append(check)
            r.checks.setdefault(u.code, f"index {r.index(u.index)} must lie in [0, {u.bound})")
            continue
        if isinstance(u, Comment) and not serial:
            w.comments += [f"/* {ln.replace('*/', '* /')} */" for ln in u.text.splitlines()]
            continue
        if isinstance(u, Noop):
            continue
        parallel = _parallel_part(u)
        if parallel is None:
            serial.append(u)
            continue
        w.serial(serial)
        serial = []
        if isinstance(parallel, Fill):
            w.fill(parallel)
        else:
            w.nest(u, *parallel)
    w.serial(serial)
    head = [f"/* ocannl_ast routine {prog.name} ({prog.precision.value}), CUDA */"]
    head += [*syntax.includes, ""]
    head += syntax.helper_defs(r.helpers, r.words)
    if r.threefry:
        head += [*syntax.threefry(r.words), ""]
    source = "\n".join([*head, *w.lines]).rstrip("\n") + "\n"
    bounds = [*w.starts, len(w.lines)]
    texts = tuple("".join(ln + "\n" for ln in w.lines[a:b]) for a, b in itertools.pairwise(bounds))
    head_text = "".join(ln + "\n" for ln in [*head, *w.lines[:bounds[0]]])
    return CudaPlan(source, cname, tuple(w.kernels), tuple(host), dict(r.checks), head_text,
                    texts)


def _parallel_part(u: Stmt) -> Fill | tuple[list[Loop], Stmt] | None:
    """A fill of many cells, or the independent outer loops of a nest and what they run."""
    if isinstance(u, Fill):
        return u if math.prod(u.buffer.dims) > 1 else None
    if not isinstance(u, ForLoop):
        return None
    loops, inner = nests.peel(u)
    for k in range(len(loops), 0, -1):
        body = nests.nest(loops[k:], inner)
        if _independent(tuple(sym for sym, _ in loops[:k]), body):
            return loops[:k], body
    return None


def render_cuda(prog: LoopProgram, syntax: CudaSyntax = CUDA) -> str:
    """The CUDA C++ translation unit of a routine: ``extern "C" __global__`` kernels."""
    return plan_cuda(prog, syntax).source


__all__ = ["CudaPlan", "HostCheck", "Kernel", "plan_cuda", "render_cuda"]
