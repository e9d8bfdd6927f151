"""CUDA backend, long reductions into few cells: a block of 256 threads shares each cell's
sum (a layer norm's gain gradient: 256 cells of 2048 terms each, which one thread a cell
summed alone in a kernel of one block).

Stage: a hook of `cuda_backend`'s kernels. Input: a top-level reduction nest of the loop IR
(`nests.match_reduction`: ``for cells: { acc = +0; for k: acc = acc + term; store }``), its
independent outer loops. Output: the kernel's body lines and thread count, or None.

A block is 8 rows of 32 lanes. Where the term reads consecutive addresses along the last
reduction loop, a row (one warp) takes one cell and its lanes the terms k = lane, lane + 32,
...; otherwise the lanes take 32 consecutive cells and the rows the terms k = row, row + 8,
.... Either way neighbouring threads read neighbouring addresses. Each thread sums its
terms in k order from +0, then the block adds the partial sums in shared memory by a fixed
tree (halving strides), and the thread of the first partial stores the cell as the nest
does. The order of the additions is fixed by the shapes alone: the same bits on every run
and every GPU, not the bits of the one-thread sum (float addition is not associative; the
results agree to rounding).

``OCANNL_AST_CUDA_REDUCE``: ``0`` off; ``1`` (the default) for at most 16384 cells of at
least 256 terms each; ``all`` every reduction of that form (tests).
"""

from __future__ import annotations

import math

from ocannl_ast import config
from ocannl_ast.backends.c_renderer import CRenderer
from ocannl_ast.backends.c_syntax import Word
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering import nests
from ocannl_ast.lowering.loop_ir import Binary, BinOp, Const, Get, GetLocal, Stmt
from ocannl_ast.lowering.walk import Loop, expr_nodes

ENV = "OCANNL_AST_CUDA_REDUCE"
LANES, ROWS = 32, 8
MAX_CELLS = 1 << 14
MIN_TERMS = 256


def mode() -> str:
    """``"0"``, ``"1"`` or ``"all"`` (`ENV`; another value is a BackendError)."""
    value = config.cuda_reduce()
    if value not in ("0", "1", "all"):
        raise BackendError(f"{ENV} must be 0, 1 or all, got {value!r}")
    return value


def plan(unit: Stmt, loops: list[Loop]) -> nests.ReductionNest | None:
    """The reduction nest `unit` is, when the block sum applies to it, else None."""
    how = mode()
    if how == "0" or not loops:
        return None
    red = nests.match_reduction(unit)
    if red is None or [s for s, _ in red.outer] != [s for s, _ in loops]:
        return None
    if not (isinstance(red.init, Const) and red.init.value == 0.0
            and math.copysign(1.0, red.init.value) > 0):
        return None
    step = red.step
    if not (isinstance(step, Binary) and step.op is BinOp.ADD):
        return None
    acc = GetLocal(red.acc)
    term = step.rhs if step.lhs == acc else step.lhs if step.rhs == acc else None
    if term is None or any(isinstance(x, GetLocal) for x in expr_nodes(term)):
        return None
    if any(isinstance(x, Get) and x.buffer.uint4x32 for x in expr_nodes(term)):
        return None
    cells = math.prod(e for _, e in red.outer)
    terms = math.prod(e for _, e in red.reduce)
    if how == "1" and (cells > MAX_CELLS or terms < MIN_TERMS):
        return None
    return red if cells and terms else None


def _term(red: nests.ReductionNest) -> object:
    step = red.step
    assert isinstance(step, Binary)
    return step.rhs if step.lhs == GetLocal(red.acc) else step.lhs


def _along_k(red: nests.ReductionNest) -> bool:
    """Whether the term's first read is contiguous along the last reduction loop."""
    last = red.reduce[-1][0]
    for x in expr_nodes(_term(red)):  # type: ignore[arg-type]
        if isinstance(x, Get):
            stride = 1
            coeff = 0
            for ix, d in zip(reversed(x.index), reversed(x.buffer.dims), strict=True):
                coeff += stride * sum(c for c, s in ix.terms if s == last)
                stride *= d
            return abs(coeff) == 1
    return False


def _bind(r: CRenderer, group: tuple[Loop, ...], var: str, depth: int) -> list[str]:
    """Declare each loop counter of `group` from the flat index `var` (first: most
    significant), naming the counters as the renderer names loop counters."""
    out: list[str] = []
    stride = math.prod(e for _, e in group)
    pad = "  " * depth
    for k, (sym, extent) in enumerate(group):
        stride //= extent
        if sym not in r.symbols:
            r.symbols[sym] = f"i{r.n_iters}"
            r.n_iters += 1
        text = var if stride == 1 else f"({var} / {stride})"
        if k > 0:
            text = f"{text} % {extent}"
        out.append(f"{pad}const long long {r.symbols[sym]} = {text};")
    return out


def render(red: nests.ReductionNest, r: CRenderer) -> tuple[int, list[str]]:
    """The kernel's body (after its static reads) and its thread count."""
    cells = math.prod(e for _, e in red.outer)
    terms = math.prod(e for _, e in red.reduce)
    along_k = _along_k(red)
    per_block = ROWS if along_k else LANES  # cells a block takes
    blocks = -(-cells // per_block)
    t = r.words[Word.TYPE]
    acc = r.local(red.acc)
    cell, first, step = (("threadIdx.x / 32", "threadIdx.x % 32", LANES) if along_k
                         else ("threadIdx.x % 32", "threadIdx.x / 32", ROWS))
    lines = [
        f"  __shared__ {t} ocannl_part[{ROWS}][{LANES}];",
        "  const int ocannl_lane = (int)threadIdx.x % 32, ocannl_row = (int)threadIdx.x / 32;",
        (f"  for (long long ocannl_blk = blockIdx.x; ocannl_blk < {blocks}LL; "
        "ocannl_blk += gridDim.x) {"),
        f"    const long long ocannl_c = ocannl_blk * {per_block} + {cell};",
        f"    {t} {acc} = {r.value(red.init)};",
        f"    if (ocannl_c < {cells}LL) {{",
        *_bind(r, red.outer, "ocannl_c", 3),
        f"      for (long long ocannl_k = {first}; ocannl_k < {terms}LL; ocannl_k += {step}) {{",
        *_bind(r, red.reduce, "ocannl_k", 4),
        f"        {acc} = {acc} + {r.value(_term(red))};",  # type: ignore[arg-type]
        "      }",
        "    }",
        f"    ocannl_part[ocannl_row][ocannl_lane] = {acc};",
        "    __syncthreads();",
    ]
    if along_k:  # the 32 lanes of a row: strides 16, 8, 4, 2, 1
        lines += [
            "    for (int ocannl_s = 16; ocannl_s > 0; ocannl_s /= 2) {",
            ("      if (ocannl_lane < ocannl_s) ocannl_part[ocannl_row][ocannl_lane] = "
            "ocannl_part[ocannl_row][ocannl_lane] + ocannl_part[ocannl_row][ocannl_lane + ocannl_s];"),
            "      __syncthreads();",
            "    }",
        ]
        head = "ocannl_lane == 0"
    else:  # the 8 rows of a lane: strides 4, 2, 1
        lines += [
            "    for (int ocannl_s = 4; ocannl_s > 0; ocannl_s /= 2) {",
            ("      if (ocannl_row < ocannl_s) ocannl_part[ocannl_row][ocannl_lane] = "
            "ocannl_part[ocannl_row][ocannl_lane] + ocannl_part[ocannl_row + ocannl_s][ocannl_lane];"),
            "      __syncthreads();",
            "    }",
        ]
        head = "ocannl_row == 0"
    store: list[str] = []
    r.stmt(red.store, 3, store)
    lines += [
        f"    if ({head} && ocannl_c < {cells}LL) {{",
        *_bind(r, red.outer, "ocannl_c", 3),
        f"      {acc} = ocannl_part[ocannl_row][ocannl_lane];",
        *store,
        "    }",
        "    __syncthreads();",
        "  }",
    ]
    return blocks * LANES * ROWS, lines


__all__ = ["ENV", "mode", "plan", "render"]
