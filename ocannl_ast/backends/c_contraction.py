"""Contraction kernels for the C backend: recognise a matmul-class loop nest in the loop IR
(`c_contraction_match`) and render it as a call to the packed, register-blocked GEMM of
`c_contraction_kernel`.

Stage: rendering (hooked into `c_renderer.CRenderer.for_loop`). Input: a `ForLoop` of a
verified `LoopProgram`. Recognised nests (`x`, `y` the two factors, `c` the result):

- ``for outer: { acc = 0; for red: acc = acc + x[..] * y[..]; c[..] = acc }``, the store
  also as ``c[..] = c[..] + acc`` (then it accumulates), and the accumulation starting
  from the cell, ``acc = c[..]; for red: acc = acc + x * y; c[..] = acc`` (the `=+` of
  input gradients and of every gradient several readers add into: it accumulates too,
  the kernel adding the sum to the cell once instead of each product in turn);
- ``for all: c[..] = c[..] + x[..] * y[..]`` (the loops `c` does not use are summed);

and the product may have a third factor over the symbols of one side (``oc.nn.conv2d``'s
window mask), multiplied into that side's packed panels.

Every index is affine in the loop symbols (any strides and axis orders, so transposes,
batch axes and convolution windows all fit; static arguments and the iterators of enclosing
loops go into a base offset); `c`
is neither factor and its cells are distinct over the outer loops. Symbols used by `c`, `x`
and `y` become the batch group, stepped through inside one call (`ocannl_mm_runb`: the
offset tables built once, the batch cells shared between threads whole when the call is
large enough; C loops around the call only when a scale factor follows it); the other outer
ones the M (rows of `x`) and N (columns of `y`) groups, the reduction loops the K group,
each a table of offsets. Nests
below `MIN_WORK` multiply-adds per call keep the naive loops. Output: C text, plus the
kernel's definitions and `-fopenmp` when some call is large enough to use threads.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Container
from dataclasses import dataclass, field
from typing import Protocol

from ocannl_ast import config
from ocannl_ast.backends.c_contraction_kernel import kernel_c, precomputed
from ocannl_ast.backends.c_contraction_match import Access, Contraction, match
from ocannl_ast.backends.c_syntax import CSyntax, Word
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering.loop_ir import (
    C_KERNEL_MIN_WORK,
    Buffer,
    ForLoop,
    LoopProgram,
    Symbol,
)
from ocannl_ast.lowering.walk import Loop, scoped

#: Smallest multiply-add count (M*N*K of one call) rendered as a kernel call.
MIN_WORK = C_KERNEL_MIN_WORK  #: one threshold with the lowering's epilogue fusion
#: Smallest M, N and K of a kernel call (a matrix-vector product stays a loop nest).
MIN_EXTENT = 4
#: Smallest multiply-add count of one call that is shared between threads.
PARALLEL_WORK = 1 << 21
#: Smallest multiply-add count of a batched call (all its cells) whose cells are shared
#: between threads (each cell whole on one thread: no splitting of its tiles).
PARALLEL_BATCH_WORK = 1 << 19
#: Return code of a routine whose kernel could not allocate its packing buffers.
OOM_CODE = 1_000_001
_MAX_GROUP = 8  # symbols per M / N / K group (the C side's table size)
#: Lanes of one vector of the kernel's columns (float32 under AVX2), for choosing N.
TILE_LANES = 8
#: Smallest K (multiply-adds per result cell) for which `_swap` takes strided stores of c.
SWAP_MIN_K = 64

class Renderer(Protocol):
    """What the kernel hook needs of `c_renderer.CRenderer`."""

    prog: LoopProgram
    syntax: CSyntax
    words: dict[str, str]
    buffers: dict[Buffer, str]
    symbols: dict[Symbol, str]
    checks: dict[int, str]
    n_iters: int
    used_buffers: set[str]  #: the C names of the buffers the text rendered so far names
    checked: bool  #: whether that text can return an error code
    team: int  #: the team size of the routine's one parallel region (0: none)
    team_units: int  #: top-level statements rendered for the whole team

    def affine(self, terms: dict[Symbol, int], offset: int) -> str: ...


def threads_setting() -> int:
    """``$OCANNL_AST_THREADS``: a positive count or ``auto`` (the machine's cores); 1 unset."""
    raw = config.threads()
    if raw == "":
        return 1
    if raw.lower() == "auto":
        return max(1, os.cpu_count() or 1)
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    raise BackendError(f"OCANNL_AST_THREADS must be a positive integer or 'auto', got {raw!r}")


@dataclass(frozen=True, slots=True)
class Plan:
    """A contraction split into batch loops and the M / N / K groups of one GEMM call."""

    c: Contraction
    x: Access  #: the factor indexed by M and K
    y: Access  #: the factor indexed by K and N
    x2: Access | None  #: a third factor over M and K, multiplied into x's panels
    y2: Access | None  #: a third factor over K and N, multiplied into y's panels
    batch: tuple[Loop, ...]
    m: tuple[Loop, ...]
    n: tuple[Loop, ...]
    k: tuple[Loop, ...]
    #: a third factor over M, N and batch only (no K): it scales each result cell after
    #: the call (``c = e * sum x y``), e.g. the ones tensor of attention's output projection
    scale: Access | None = None

    def work(self) -> int:
        return math.prod(e for _, e in (*self.m, *self.n, *self.k))


# ---- recognising ---------------------------------------------------------------------


def _injective(loops: list[tuple[int, int]]) -> bool:
    """Whether sum(coeff * digit) over digits < extent takes distinct values (mixed radix)."""
    reach = 0
    for coeff, extent in sorted((abs(c), e) for c, e in loops if e > 1):
        if coeff <= reach:
            return False
        reach += coeff * (extent - 1)
    return True


def plan(c: Contraction) -> Plan | None:
    """Batch loops and the GEMM groups of `c`, or None when it does not fit the kernel."""
    if any(c.out.coeff(s) != 0 for s, _ in c.reduce):
        return None
    if not _injective([(c.out.coeff(s), e) for s, e in c.outer]):
        return None
    f = c.factors
    roles = [(f[0], f[1], None)] if len(f) == 2 else [
        (f[0], f[1], f[2]), (f[0], f[2], f[1]), (f[1], f[2], f[0])]
    for x, y, extra in roles:
        p = _plan_roles(c, x, y, extra)
        if p is not None and _big_enough(p):
            return p
    if len(f) == 3 and not c.accumulate:  # a factor constant over K: scale afterwards
        for e in f:
            if all(e.coeff(s) == 0 for s, _ in c.reduce):
                x, y = (g for g in f if g is not e)
                p = _plan_roles(c, x, y, None)
                if p is not None and _big_enough(p):
                    return dataclasses.replace(p, scale=e)
    return None


def _big_enough(p: Plan) -> bool:
    sizes = [math.prod(e for _, e in g) for g in (p.m, p.n, p.k)]
    return min(sizes) >= MIN_EXTENT and p.work() >= MIN_WORK


def _lane_use(size: int) -> float:
    """The share of the kernel's column tiles (whole vectors of `TILE_LANES`) that `size`
    columns fill."""
    return size / max(TILE_LANES, -(-size // TILE_LANES) * TILE_LANES)


def _dense(a: Access, group: list[Loop]) -> bool:
    """Whether `a`'s offsets over the group are 0, 1, 2, ... (one contiguous run)."""
    step = 1
    for s, e in sorted(group, key=lambda lp: abs(a.coeff(lp[0]))):
        if a.coeff(s) != step:
            return False
        step *= e
    return True


def _swap(c: Contraction, x: Access, y: Access, m: list[Loop], n: list[Loop],
          two_factors: bool) -> bool:
    """Whether the M group should be the N group (the kernel's columns: its vector lanes,
    and the factor it packs, K x N). When `y` is gathered along N and `x` is one contiguous
    run along M, swapped the kernel packs contiguous rows instead of gathering, over at least
    as well filled lanes, for enough K to pay for c's then strided stores (a convolution
    kernel's gradient: the image's window cells gathered against the output gradient's
    channels, 3.5x faster at 9 cells, 1.6x at 27; not with a third factor, which the
    packing multiplies in cell by cell either way). Else the contiguous axis of c is N. The
    products and their order over K are the same either way (the same bits)."""
    sm, sn = (math.prod(e for _, e in g) for g in (m, n))
    sk = math.prod(e for _, e in c.reduce)
    if two_factors and not _dense(y, n) and _dense(x, m) and sm >= TILE_LANES and \
            sk >= SWAP_MIN_K and _lane_use(sm) >= _lane_use(sn):
        return True
    return not any(abs(c.out.coeff(s)) == 1 for s, _ in n) and any(
        abs(c.out.coeff(s)) == 1 for s, _ in m)  # the contiguous axis of c as N


def _plan_roles(c: Contraction, x: Access, y: Access, extra: Access | None) -> Plan | None:
    """The plan with `x` over M and K, `y` over K and N, and `extra` on the side whose
    outer symbols include all of its own (None when it fits neither)."""
    batch = [lp for lp in c.outer if x.coeff(lp[0]) != 0 and y.coeff(lp[0]) != 0]
    m = [lp for lp in c.outer if lp not in batch and y.coeff(lp[0]) == 0]
    n = [lp for lp in c.outer if lp not in batch and lp not in m]
    x2 = y2 = None
    if extra is not None:
        used = {lp for lp in c.outer if extra.coeff(lp[0]) != 0}
        if used <= {*m, *batch}:
            x2 = extra
        elif used <= {*n, *batch}:
            y2 = extra
        else:
            return None
    if _swap(c, x, y, m, n, extra is None):
        x, y, m, n, x2, y2 = y, x, n, m, y2, x2
    m.sort(key=lambda lp: -abs(c.out.coeff(lp[0])))
    n.sort(key=lambda lp: -abs(c.out.coeff(lp[0])))
    k = sorted(c.reduce, key=lambda lp: -abs(x.coeff(lp[0])))
    if max(len(m), len(n), len(k)) > _MAX_GROUP:
        return None
    return Plan(c, x, y, x2, y2, tuple(batch), tuple(m), tuple(n), tuple(k))


# ---- rendering -----------------------------------------------------------------------


@dataclass(slots=True)
class KernelUse:
    """The kernel calls of one routine: their count and whether one uses threads."""

    threads: int = field(default_factory=threads_setting)
    calls: int = 0
    parallel: bool = False
    #: the calls' table texts by descriptor (`_call_table`)
    tables: dict[tuple[tuple[int, ...], bool, bool], str] = field(default_factory=dict)

    def definitions(self, words: dict[str, str]) -> list[str]:
        return kernel_c(words[Word.TYPE], words[Word.SUFFIX]) if self.calls else []

    def flags(self) -> tuple[str, ...]:
        return ("-fopenmp",) if self.parallel else ()

    def takes(self, r: Renderer, loop: ForLoop, bound: Container[Symbol]) -> Plan | None:
        """The plan of the kernel call `render` would make of `loop`, or None."""
        found = match(loop, bound)
        p = plan(found) if found is not None else None
        if p is None or any(a.buffer not in r.buffers for a in (p.c.out, *p.c.factors)):
            return None
        return p

    def takes_inner(self, r: Renderer, loop: ForLoop) -> bool:
        """Whether the kernel may take a loop inside `loop` (with every symbol of the nest
        known: a superset of what rendering it would know)."""
        inner = [s for s, _ in scoped(loop.body) if isinstance(s, ForLoop)]
        bound = frozenset(r.symbols) | {x.symbol for x in (loop, *inner)}
        return any(self.takes(r, x, bound) is not None for x in inner)

    def render(self, r: Renderer, loop: ForLoop, depth: int, out: list[str]) -> bool:
        """Append the kernel call computing `loop`, if it is a contraction; else False. In
        the routine's parallel region (`r.team`) a threaded call at the top of a part is
        made by the whole team (`c_contraction_threads`) and records its error code in
        ``ocannl_err`` instead of returning; a call inside a statement runs on one thread."""
        p = self.takes(r, loop, r.symbols)  # (the symbols named so far: bound)
        if p is None:
            return False
        batched = bool(p.batch) and p.scale is None
        cells = math.prod(e for _, e in p.batch) if batched else 1
        big = p.work() >= PARALLEL_WORK or (cells > 1 and p.work() * cells >= PARALLEL_BATCH_WORK)
        nthreads = self.threads if big else 1
        team = bool(r.team) and nthreads > 1 and depth == 1 and (batched or not p.batch)
        if r.team:
            nthreads = -r.team if team else 1
            r.team_units += team
        self.parallel |= nthreads != 1
        name = f"ocannl_mmd{self.calls}"
        self.calls += 1
        r.checks.setdefault(OOM_CODE, "out of memory for a contraction kernel's buffers")
        fail = f"ocannl_err = {OOM_CODE};" if team else f"return {OOM_CODE};"
        r.checked = True  # the call returns OOM_CODE when its panels cannot be allocated
        out.extend(_batched_call_text(r, p, name, nthreads, depth, fail, self.tables)
                   if batched else _call_text(r, p, name, nthreads, depth, fail, self.tables))
        return True


def _describe(p: Plan) -> str:
    def names(g: tuple[Loop, ...]) -> str:
        return "x".join(str(e) for _, e in g) or "1"

    c = p.c
    factors = " * ".join(f.buffer.name for f in (p.x, p.x2, p.y, p.y2) if f is not None)
    if p.scale is not None:
        factors = f"{p.scale.buffer.name} * ({factors})"
    return (f"contraction kernel: {c.out.buffer.name} {'+=' if c.accumulate else '='} "
            f"{factors}, M {names(p.m)}, N {names(p.n)}, K {names(p.k)}, "
            f"batch {names(p.batch)}")


def _table(p: Plan) -> list[int]:
    def co(a: Access | None, s: Symbol) -> int:
        return a.coeff(s) if a is not None else 0

    d = [len(p.m), len(p.n), len(p.k)]
    for s, e in p.m:
        d += [e, p.x.coeff(s), co(p.x2, s), p.c.out.coeff(s)]
    for s, e in p.n:
        d += [e, p.y.coeff(s), co(p.y2, s), p.c.out.coeff(s)]
    for s, e in p.k:
        d += [e, p.x.coeff(s), co(p.x2, s), p.y.coeff(s), co(p.y2, s)]
    return d


def _call_table(p: Plan, memo: dict[tuple[tuple[int, ...], bool, bool], str]) -> str:
    """The call's table as C initializer text: its offset tables themselves when small
    enough (`precomputed`), else their description. `memo`: the texts made so far for the
    routine, by descriptor (a deep model's calls repeat a few)."""
    key = (tuple(_table(p)), p.x2 is not None, p.y2 is not None)
    text = memo.get(key)
    if text is None:
        d = key[0]
        text = memo[key] = ", ".join(map(str, precomputed(d, key[1], key[2]) or d))
    return text


def _batch_table(p: Plan) -> list[int]:
    """The kernel's batch group: the count, then per symbol its extent and the strides of
    x, x2, y, y2 and c."""
    d = [len(p.batch)]
    for s, e in p.batch:
        d += [e, *((a.coeff(s) if a is not None else 0) for a in (p.x, p.x2, p.y, p.y2,
                                                                 p.c.out))]
    return d


def _base(r: Renderer, a: Access | None, p: Plan, batched: bool = False) -> str:
    """The buffer's name plus the offset of its static, enclosing-loop and constant terms
    and, unless `batched` (the kernel steps through them), of its batch terms (every symbol
    outside the M, N and K groups)."""
    if a is None:
        return "0"
    grouped = {s for s, _ in (*p.m, *p.n, *p.k, *(p.batch if batched else ()))}
    terms = {s: c for s, c in a.coeffs if s not in grouped}
    offset = r.affine(terms, a.offset)
    name = r.buffers[a.buffer]
    r.used_buffers.add(name)
    return name if offset == "0" else f"{name} + ({offset})"


def _call_text(r: Renderer, p: Plan, name: str, nthreads: int, depth: int,
               fail: str, tables: dict[tuple[tuple[int, ...], bool, bool], str]) -> list[str]:
    pad = "  " * depth
    lines = [f"{pad}/* {_describe(p)} */", pad + "{",
             f"{pad}  static const int64_t {name}[] = {{{_call_table(p, tables)}}};"]
    inner = depth + 1
    for s, e in p.batch:
        r.symbols[s] = f"i{r.n_iters}"
        r.n_iters += 1
        lines.append("  " * inner + r.syntax.for_header(r.symbols[s], e))
        inner += 1
    args = ", ".join([_base(r, p.x, p), _base(r, p.x2, p), _base(r, p.y, p), _base(r, p.y2, p),
                      _base(r, p.c.out, p), str(int(p.c.accumulate)), str(nthreads), name])
    run = f"ocannl_mm_run_{r.words[Word.SUFFIX]}"
    lines.append(f"{'  ' * inner}if ({run}({args})) {fail}")
    if p.scale is not None:
        if nthreads < 0:  # the whole team scales: its cells shared out (after the call's barrier)
            lines.append("  " * inner + "#pragma omp for schedule(static)")
        lines += _scale_text(r, p, inner)
    for level in range(inner - 1, depth, -1):
        lines.append("  " * level + "}")
    return [*lines, pad + "}"]


def _batched_call_text(r: Renderer, p: Plan, name: str, nthreads: int, depth: int,
                       fail: str, tables: dict[tuple[tuple[int, ...], bool, bool], str]
                       ) -> list[str]:
    """One call over all of the batch loops (the offset tables built once per call)."""
    pad = "  " * depth
    args = ", ".join([*(_base(r, a, p, True) for a in (p.x, p.x2, p.y, p.y2, p.c.out)),
                      str(int(p.c.accumulate)), str(nthreads), name, f"{name}b"])
    batch = _batch_table(p)
    return [f"{pad}/* {_describe(p)} */", pad + "{",
            f"{pad}  static const int64_t {name}[] = {{{_call_table(p, tables)}}};",
            f"{pad}  static const int64_t {name}b[] = {{{', '.join(map(str, batch))}}};",
            f"{pad}  if (ocannl_mm_runb_{r.words[Word.SUFFIX]}({args})) {fail}",
            pad + "}"]


def _scale_text(r: Renderer, p: Plan, depth: int) -> list[str]:
    """``c[..] = c[..] * e[..]`` over the M and N loops (inside the batch loops)."""
    assert p.scale is not None
    lines = []
    for level, (s, e) in enumerate((*p.m, *p.n)):
        r.symbols[s] = f"i{r.n_iters}"
        r.n_iters += 1
        lines.append("  " * (depth + level) + r.syntax.for_header(r.symbols[s], e))
    inner = depth + len(p.m) + len(p.n)
    cells = []
    for a in (p.c.out, p.scale):
        name = r.buffers[a.buffer]
        r.used_buffers.add(name)
        cells.append(r.syntax.cell(name, r.affine(dict(a.coeffs), a.offset)))
    lines.append(f"{'  ' * inner}{cells[0]} = {cells[0]} * {cells[1]};")
    for level in range(inner - 1, depth - 1, -1):
        lines.append("  " * level + "}")
    return lines
