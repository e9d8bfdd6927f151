"""Lane-blocked reductions for the C backend: an innermost reduction loop
``for k < n: acc = acc (+ | max | min) t(k)`` of at least `MIN_EXTENT` iterations is
summed in `LANES` independent partial results (lane ``l`` takes ``k = l, l + 8, ...``),
combined by a fixed tree and then into ``acc``, so gcc vectorizes it (a strict in-order
fold is one latency chain that stays scalar):

    { T L[8] = {neutral x 8};
      for b < n / 8: for l < 8: L[l] = L[l] op t(8 b + l);      /* vectorized */
      for l < n % 8: L[l] = L[l] op t(8 (n / 8) + l);
      acc = acc op (((L0 op L1) op (L2 op L3)) op ((L4 op L5) op (L6 op L7))); }

(the tree in vector registers: `c_lane_combine`, the same bits).

Taken: a sum, max or min of at least `MIN_EXTENT` terms whose reads all step by 0 or 1
element along the loop (`takes`): a row of a softmax, a layer norm, a cross-entropy; and a
subtraction ``acc = acc - t(k)`` (the ``=-`` of a gradient: layer norm's and softmax's
backward rows), each lane then taking ``L[l] = L[l] - t`` from -0.0 (``-0.0 - t`` is ``-t``
exactly) and the lanes added to ``acc`` by the tree of sums: ``acc + (L0 + ...)``.

Stage: rendering (hooked into `c_renderer.CRenderer.for_loop`, after the contraction
kernels and the reduction reordering, which refuses every nest whose innermost loop this
takes, so the order does not depend on ``OCANNL_AST_REORDER``).
Input: a `ForLoop` of a verified `LoopProgram`. Output: C text.

Numerics: a sum is reassociated (differs from the in-order fold by rounding, about
``n * eps * sum |t|`` at worst, like a pairwise sum); max and min give the same value (only
which of +0 / -0, or which NaN, can differ). The order depends only on the loop itself
(its extent and body), never on the machine, the vector width, the thread count or the
scheduling passes: every path that renders the loop (`OCANNL_AST_SCHEDULE=0`,
`OCANNL_AST_REORDER=0`, any `OCANNL_AST_THREADS`) gives the same bits. Loops of at most
`loop_ir.MAX_UNROLL` terms are never taken (the unrolling pass would make them straight
code on one path only). ``OCANNL_AST_LANES=0`` keeps every fold in order.
"""

from __future__ import annotations

import math
from typing import Protocol

from ocannl_ast import config
from ocannl_ast.backends.c_syntax import CSyntax, Word
from ocannl_ast.lowering.loop_ir import (
    MAX_UNROLL,
    Binary,
    BinOp,
    Buffer,
    Expr,
    ForLoop,
    GetLocal,
    LoopProgram,
    SetLocal,
    Symbol,
    UnOp,
)
from ocannl_ast.lowering.nests import flat_terms
from ocannl_ast.lowering.walk import gets, local_names

#: Partial results per loop (fixed: the order must not depend on the machine).
LANES = 8
#: Shortest loop taken: longer than any reduction the unrolling pass unrolls.
MIN_EXTENT = MAX_UNROLL + 1
#: The reductions taken and the neutral element each lane starts from (-0.0 for a sum:
#: ``-0.0 + x`` is ``x`` for every x, -0.0 included).
NEUTRAL = {BinOp.ADD: -0.0, BinOp.SUB: -0.0, BinOp.MAX: -math.inf, BinOp.MIN: math.inf}
#: How the lanes are combined, and into ``acc``: a subtraction's lanes hold negated partial
#: sums, added (``acc - t0 - t1 ...`` becomes ``acc + ((-t0 - ...) + ...)``).
COMBINE = {BinOp.SUB: BinOp.ADD}
#: The helper combining the lanes by the tree, per combining op (`c_lane_combine`).
_COMBINE_NAMES = {BinOp.ADD: "add", BinOp.MAX: "max", BinOp.MIN: "min"}


class Renderer(Protocol):
    """What the lane hook needs of `c_renderer.CRenderer`."""

    prog: LoopProgram
    syntax: CSyntax
    words: dict[str, str]
    buffers: dict[Buffer, str]
    symbols: dict[Symbol, str]
    n_iters: int
    helpers: set[str]

    def local(self, name: str) -> str: ...
    def fresh(self, stem: str) -> str: ...
    def op(self, op: UnOp | BinOp, *args: str) -> str: ...
    def value(self, e: Expr) -> str: ...


def enabled() -> bool:
    """``$OCANNL_AST_LANES``: on unless it is ``0``."""
    return config.lanes()


def lane_op(acc: str, step: Expr) -> tuple[BinOp, Expr] | None:
    """``acc op t`` (op a lane reduction, `t` not reading `acc`): the op and `t`, else None.
    Example: ``lane_op("s", Binary(BinOp.ADD, GetLocal("s"), t))``."""
    if not isinstance(step, Binary) or step.op not in NEUTRAL or step.lhs != GetLocal(acc):
        return None
    return None if acc in local_names(step.rhs) else (step.op, step.rhs)


def takes(sym: Symbol, extent: int, acc: str, step: Expr) -> bool:
    """Whether the innermost loop ``for sym < extent: acc = step`` is rendered in lanes: a
    lane reduction (`lane_op`) of at least `MIN_EXTENT` terms whose every read steps by 0
    or 1 element along `sym` (lanes read consecutive numbers; a strided one, e.g. a sum
    over a batch axis, is the reduction reordering's to vectorize across its cells)."""
    found = lane_op(acc, step) if extent >= MIN_EXTENT else None
    return found is not None and all(
        flat_terms(g.buffer.dims, g.index)[0].get(sym, 0) in (0, 1) for g in gets(found[1]))


def _unique(r: Renderer, stem: str) -> str:
    return r.fresh(stem)


def _counter(r: Renderer) -> str:
    name = f"i{r.n_iters}"
    r.n_iters += 1
    return name




def render(r: Renderer, loop: ForLoop, depth: int, out: list[str]) -> bool:
    """Append the lane-blocked form of `loop`, if `takes` it; else False."""
    body = loop.body
    if loop.threads > 1 or not isinstance(body, SetLocal) or \
            not takes(loop.symbol, loop.extent, body.name, body.value):
        return False
    found = lane_op(body.name, body.value)
    assert found is not None
    op, term = found
    t = r.words[Word.TYPE]
    lanes = _unique(r, "ocannl_lane")
    r.buffers[Buffer(-1 - len(r.buffers), lanes, (LANES,))] = lanes
    neutral = r.syntax.const(NEUTRAL[op], r.prog.precision)
    blocks, rest = divmod(loop.extent, LANES)
    b, lane, k = _counter(r), _counter(r), _counter(r)
    r.symbols[loop.symbol] = k
    pad = "  " * depth
    step = f"{lanes}[{lane}] = {_strip(r.op(op, f'{lanes}[{lane}]', r.value(term)))};"
    idx = r.syntax.index_type
    out += [f"{pad}/* in {LANES} lanes: {loop.extent} terms */", pad + "{",
            f"{pad}  {t} {lanes}[{LANES}] = {{{', '.join([neutral] * LANES)}}};",
            f"{pad}  {r.syntax.for_header(b, blocks)}",
            f"{pad}    {r.syntax.for_header(lane, LANES)}",
            f"{pad}      const {idx} {k} = {LANES}*{b} + {lane};",
            f"{pad}      {step}", f"{pad}    }}", f"{pad}  }}"]
    if rest:
        out += [f"{pad}  {r.syntax.for_header(lane, rest)}",
                f"{pad}    const {idx} {k} = {LANES * blocks} + {lane};",
                f"{pad}    {step}", f"{pad}  }}"]
    acc = r.local(body.name)
    comb = COMBINE.get(op, op)
    helper = f"tree8_{_COMBINE_NAMES[comb]}"
    r.helpers.add(helper)
    whole = f"ocannl_{helper}_{r.words[Word.SUFFIX]}({lanes})"
    out += [f"{pad}  {acc} = {r.op(comb, acc, whole)};", pad + "}"]
    return True


def _strip(text: str) -> str:
    """``(a + b)`` -> ``a + b`` (an operator's text is parenthesized whole or a call)."""
    return text[1:-1] if text.startswith("(") and text.endswith(")") else text
