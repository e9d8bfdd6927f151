"""CUDA backend, contractions through shared memory: a block of 256 threads computes a
64 x 64 tile of output cells, staging 16-wide K slices of both factors in shared memory with
coalesced loads, each thread a 4 x 4 register tile of cells.

Stage: a hook of `cuda_backend`'s kernels. Input: a top-level loop nest of the loop IR that
is a sum of products of two or three float32 reads into a local (`nests.match_reduction`;
a third factor must not vary along one of the two sides: it is staged beside the other), its
independent outer loops, and the symbols bound around it (the static arguments). Output:
the kernel's body lines and its thread count, or None to leave the nest to the grid-stride
kernel (`cuda_tile`).

The factors' roles: M (the outer loops only the first factor reads), N (only the second;
the output's contiguous axis goes here, so that neighbouring threads store neighbouring
cells), K (the reduction loops) and batch (the other outer loops); each group is flattened
in the nest's loop order. Every cell keeps its own accumulator, starts it as the nest does
(from +0 or from the cell), adds its products in the nest's K order with the same
operations in the same association (``acc = acc + (x * y) * z``; NVRTC runs without
contraction into FMA) and stores as
the nest does (``c = acc`` or ``c = c + acc``): the bits are those of the grid-stride kernel.
A K slice past the end runs only its real terms; cells past M or N compute from zeros and
store nothing.

``OCANNL_AST_CUDA_GEMM``: ``0`` off; ``1`` (the default) where the work pays (each of M, N,
K at least 16, at least 2^18 multiply-adds in all); ``all`` every nest of that form (tests).
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass

from ocannl_ast import config
from ocannl_ast.backends.c_contraction_match import Access, Contraction, match
from ocannl_ast.backends.c_renderer import CRenderer
from ocannl_ast.errors import BackendError
from ocannl_ast.lowering import nests
from ocannl_ast.lowering.loop_ir import Binary, BinOp, Const, Expr, Get, GetLocal, Stmt, Symbol
from ocannl_ast.lowering.walk import Loop

ENV = "OCANNL_AST_CUDA_GEMM"
BM = BN = 64  #: a block's tile of output cells
BK = 16  #: the K slice staged in shared memory
TM = TN = 4  #: a thread's register tile
THREADS = (BM // TM) * (BN // TN)  #: 256
MIN_SIDE = 16
MIN_WORK = 1 << 18


def mode() -> str:
    """``"0"``, ``"1"`` or ``"all"`` (`ENV`; another value is a BackendError)."""
    value = config.cuda_gemm()
    if value not in ("0", "1", "all"):
        raise BackendError(f"{ENV} must be 0, 1 or all, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Gemm:
    """A contraction ``out[batch, m, n] (=|+=) sum_k x[batch, m, k] * y[batch, k, n]``."""

    out: Access
    x: Access
    y: Access
    batch: tuple[Loop, ...]
    m: tuple[Loop, ...]
    n: tuple[Loop, ...]
    k: tuple[Loop, ...]
    from_cell: bool  #: the accumulator starts as the cell (else +0)
    add: bool  #: the store adds the accumulator to the cell
    #: the summed product as the nest writes it, each read replaced by its factor's role
    #: ("x", "y" or "z"): the same association, so the same roundings
    product: str = "(ocannl_xv[{i}] * ocannl_yv[{j}])"
    z: Access | None = None  #: a third factor, staged beside x ("x") or y ("y")
    z_side: str = ""

    def sizes(self) -> tuple[int, int, int, int]:
        return tuple(math.prod(e for _, e in g)  # type: ignore[return-value]
                     for g in (self.batch, self.m, self.n, self.k))

    def tiles(self) -> int:
        b, m, n, _ = self.sizes()
        return b * -(-m // BM) * -(-n // BN)


def _is_zero(e: object) -> bool:
    return isinstance(e, Const) and e.value == 0.0 and math.copysign(1.0, e.value) > 0


def plan(unit: Stmt, loops: list[Loop], bound: Container[Symbol], r: CRenderer
         ) -> Gemm | None:
    """The tiled contraction `unit` is, with `loops` its independent outer loops, or None."""
    how = mode()
    if how == "0":
        return None
    red = nests.match_reduction(unit)
    c = match(unit, bound) if red is not None else None  # type: ignore[arg-type]
    if red is None or c is None or len(c.factors) not in (2, 3):
        return None
    if [s for s, _ in red.outer] != [s for s, _ in loops] or \
            [s for s, _ in red.reduce] != [s for s, _ in c.reduce]:
        return None
    store = red.store
    if _is_zero(red.init):
        from_cell = False
    elif isinstance(red.init, Get) and red.init.buffer == store.buffer and \
            red.init.index == store.index:
        from_cell = True
    else:
        return None
    value = store.value
    if isinstance(value, GetLocal) and value.name == red.acc:
        add = False
    elif not from_cell and isinstance(value, Binary) and value.op is BinOp.ADD and \
            {type(value.lhs), type(value.rhs)} == {Get, GetLocal} and all(
                (isinstance(t, GetLocal) and t.name == red.acc)
                or (isinstance(t, Get) and t.buffer == store.buffer and t.index == store.index)
                for t in (value.lhs, value.rhs)):
        add = True
    else:
        return None
    if any(r.buffer_type(a.buffer) != "float" for a in (c.out, *c.factors)):
        return None
    step = red.step
    if not (isinstance(step, Binary) and step.op is BinOp.ADD):
        return None
    term = step.rhs if step.lhs == GetLocal(red.acc) else step.lhs
    leaves = _leaves(term)
    if leaves is None or len(leaves) != len(c.factors):
        return None
    g = _roles(c, loops, term, from_cell, add)
    if g is None:
        return None
    _, sm, sn, sk = g.sizes()
    if how == "1" and (min(sm, sn, sk) < MIN_SIDE or g.sizes()[0] * sm * sn * sk < MIN_WORK):
        return None
    return g if sm and sn and sk and g.sizes()[0] else None


def _leaves(e: Expr) -> list[Get] | None:
    """The reads of a product of reads, left to right (`match`'s order of factors)."""
    if isinstance(e, Get):
        return [e]
    if isinstance(e, Binary) and e.op is BinOp.MUL:
        left, right = _leaves(e.lhs), _leaves(e.rhs)
        return None if left is None or right is None else left + right
    return None


def _roles(c: Contraction, loops: list[Loop], term: Expr, from_cell: bool, add: bool
           ) -> Gemm | None:
    """M, N, K and batch of `c` and each factor's role: the first two that split the output
    loops (a third only on one side of them), the output's contiguous axis along N."""
    f = c.factors
    for iz in ([None] if len(f) == 2 else [2, 1, 0]):
        ix, iy = [i for i in range(len(f)) if i != iz]
        x, y = f[ix], f[iy]
        m = tuple(lp for lp in loops if x.coeff(lp[0]) != 0 and y.coeff(lp[0]) == 0)
        n = tuple(lp for lp in loops if y.coeff(lp[0]) != 0 and x.coeff(lp[0]) == 0)
        batch = tuple(lp for lp in loops if lp not in m and lp not in n)
        if any(c.out.coeff(s) == 0 for s, _ in (*m, *n)):
            continue  # (a product over a loop the output does not index: not a matmul)
        z, side = None, ""
        if iz is not None:
            z = f[iz]
            side = ("x" if all(z.coeff(s) == 0 for s, _ in n)
                    else "y" if all(z.coeff(s) == 0 for s, _ in m) else "")
            if not side:
                continue
        roles = {ix: "x", iy: "y", **({iz: "z"} if iz is not None else {})}
        if _unit_stride(c.out, m) and not _unit_stride(c.out, n):
            x, y, m, n = y, x, n, m  # the output's contiguous axis along N
            roles = {i: {"x": "y", "y": "x"}.get(v, v) for i, v in roles.items()}
            side = {"x": "y", "y": "x"}.get(side, side)
        return Gemm(c.out, x, y, batch, m, n, tuple(c.reduce), from_cell, add,
                    _product(term, roles, side, [0]), z, side)
    return None


def _product(e: Expr, roles: dict[int, str], side: str, count: list[int]) -> str:
    """The product over the staged values, a template of the thread's cell (i, j):
    ``((ocannl_xv[{i}] * ocannl_yv[{j}]) * ocannl_zv[{i}])``, reads in `match`'s order."""
    if isinstance(e, Get):
        role = roles[count[0]]
        count[0] += 1
        at = "i" if role == "x" or (role == "z" and side == "x") else "j"
        return f"ocannl_{role}v[{{{at}}}]"
    assert isinstance(e, Binary)
    return f"({_product(e.lhs, roles, side, count)} * {_product(e.rhs, roles, side, count)})"


def _unit_stride(a: Access, group: tuple[Loop, ...]) -> bool:
    return bool(group) and abs(a.coeff(group[-1][0])) == 1


# ---- rendering -----------------------------------------------------------------------


def _digits(group: tuple[Loop, ...], var: str) -> list[tuple[Symbol, str]]:
    """Each loop's index within the flat index `var` of its group (first: most significant)."""
    out: list[tuple[Symbol, str]] = []
    stride = math.prod(e for _, e in group)
    for k, (sym, extent) in enumerate(group):
        stride //= extent
        text = var if stride == 1 else f"({var} / {stride})"
        if k > 0 and extent > 1:
            text = f"({text} % {extent})"
        out.append((sym, "0" if extent == 1 else text))
    return out


def _offset(a: Access, parts: list[tuple[Symbol, str]], r: CRenderer) -> str:
    """`a`'s flat offset, its loop symbols read from `parts`, the others (static arguments)
    from the renderer's names."""
    where = dict(parts)
    terms = [str(a.offset)] if a.offset else []
    for sym, coeff in a.coeffs:
        name = where.get(sym)
        if name is None:
            name = r.symbols[sym]
        if name != "0":
            terms.append(f"{coeff}LL * {name}")
    return " + ".join(terms) or "0"


def _stage(r: CRenderer, a: Access, rows: tuple[Loop, ...], g: Gemm, side: str,
           rows_var: str, extent: int, bdig: list[tuple[Symbol, str]]) -> list[str]:
    """Load `a`'s BK x side slice into shared memory (zeros past an end), each thread 4
    elements, consecutive threads along `a`'s contiguous axis (K or the rows)."""
    by_k = _unit_stride(a, g.k) or not _unit_stride(a, rows)
    width = BM if side == "ocannl_xs" else BN
    idx = ("ocannl_e % 16", "ocannl_e / 16") if by_k else ("ocannl_e / 64", "ocannl_e % 64")
    kk, rr = idx
    _, _, _, sk = g.sizes()
    pos = [*bdig, *_digits(rows, "ocannl_r"), *_digits(g.k, "ocannl_k")]
    name = r.buffers[a.buffer]
    return [
        f"      for (int ocannl_q = 0; ocannl_q < {BK * width // THREADS}; ++ocannl_q) {{",
        f"        const int ocannl_e = (int)threadIdx.x + {THREADS} * ocannl_q;",
        f"        const long long ocannl_k = ocannl_k0 + {kk}, ocannl_r = {rows_var} + {rr};",
        (f"        {side}[{kk}][{rr}] = (ocannl_k < {sk} && ocannl_r < {extent}) ? "
        f"{name}[{_offset(a, pos, r)}] : 0.0f;"),
        "      }",
    ]


def render(g: Gemm, r: CRenderer) -> tuple[int, list[str]]:
    """The kernel's body (after its static reads) and its thread count."""
    _nb, sm, sn, sk = g.sizes()
    mt, nt = -(-sm // BM), -(-sn // BN)
    total = g.tiles()
    bdig = _digits(g.batch, "ocannl_b")
    cell = [*bdig, *_digits(g.m, "ocannl_m"), *_digits(g.n, "ocannl_n")]
    out = f"{r.buffers[g.out.buffer]}[{_offset(g.out, cell, r)}]"
    lines = [
        f"  __shared__ float ocannl_xs[{BK}][{BM + 1}];  // (a column apart: no bank conflicts)",
        f"  __shared__ float ocannl_ys[{BK}][{BN + 1}];",
        *([f"  __shared__ float ocannl_zs[{BK}][{BM + 1}];"] if g.z is not None else []),
        (f"  const int ocannl_tx = (int)threadIdx.x % {BN // TN}, "
        f"ocannl_ty = (int)threadIdx.x / {BN // TN};"),
        (f"  for (long long ocannl_tile = blockIdx.x; ocannl_tile < {total}LL; "
        "ocannl_tile += gridDim.x) {"),
        (f"    const long long ocannl_b = ocannl_tile / {mt * nt}, "
        f"ocannl_m0 = (ocannl_tile / {nt}) % {mt} * {BM}, ocannl_n0 = ocannl_tile % {nt} * {BN};"),
        "    (void)ocannl_b;",
        f"    float ocannl_acc[{TM}][{TN}];",
        f"    for (int i = 0; i < {TM}; ++i) {{",
        f"      for (int j = 0; j < {TN}; ++j) {{",
    ]
    if g.from_cell:
        lines += [
            (f"        const long long ocannl_m = ocannl_m0 + ocannl_ty * {TM} + i, "
            f"ocannl_n = ocannl_n0 + ocannl_tx + {BN // TN} * j;"),
            f"        ocannl_acc[i][j] = (ocannl_m < {sm} && ocannl_n < {sn}) ? {out} : 0.0f;",
        ]
    else:
        lines.append("        ocannl_acc[i][j] = 0.0f;")
    lines += ["      }", "    }",
              f"    for (long long ocannl_k0 = 0; ocannl_k0 < {sk}; ocannl_k0 += {BK}) {{"]
    lines += _stage(r, g.x, g.m, g, "ocannl_xs", "ocannl_m0", sm, bdig)
    lines += _stage(r, g.y, g.n, g, "ocannl_ys", "ocannl_n0", sn, bdig)
    z_rows = "ocannl_ty * 4 + {0}" if g.z_side == "x" else f"ocannl_tx + {BN // TN} * {{0}}"
    if g.z is not None:
        lines += (_stage(r, g.z, g.m, g, "ocannl_zs", "ocannl_m0", sm, bdig) if g.z_side == "x"
                  else _stage(r, g.z, g.n, g, "ocannl_zs", "ocannl_n0", sn, bdig))
    step = [
        "        float ocannl_xv[4], ocannl_yv[4];",
        *(["        float ocannl_zv[4];"] if g.z is not None else []),
        *(f"        ocannl_xv[{i}] = ocannl_xs[ocannl_kk][ocannl_ty * {TM} + {i}];"
          for i in range(TM)),
        *(f"        ocannl_yv[{j}] = ocannl_ys[ocannl_kk][ocannl_tx + {BN // TN * j}];"
          for j in range(TN)),
        *(f"        ocannl_zv[{q}] = ocannl_zs[ocannl_kk][{z_rows.format(q)}];"
          for q in range(TM) if g.z is not None),
        *(f"        ocannl_acc[{i}][{j}] = ocannl_acc[{i}][{j}] + "
          f"{g.product.format(i=i, j=j)};" for i in range(TM) for j in range(TN)),
    ]
    lines += [
        "      __syncthreads();",
        (f"      const int ocannl_kn = {sk}LL - ocannl_k0 < {BK} ? (int)({sk}LL - ocannl_k0) "
        f": {BK};"),
        f"      if (ocannl_kn == {BK}) {{",
        "#pragma unroll",
        f"      for (int ocannl_kk = 0; ocannl_kk < {BK}; ++ocannl_kk) {{",
        *step,
        "      }",
        "      } else {",
        "      for (int ocannl_kk = 0; ocannl_kk < ocannl_kn; ++ocannl_kk) {",
        *step,
        "      }",
        "      }",
        "      __syncthreads();",
        "    }",
        f"    for (int i = 0; i < {TM}; ++i) {{",
        f"      for (int j = 0; j < {TN}; ++j) {{",
        (f"        const long long ocannl_m = ocannl_m0 + ocannl_ty * {TM} + i, "
        f"ocannl_n = ocannl_n0 + ocannl_tx + {BN // TN} * j;"),
        f"        if (ocannl_m < {sm} && ocannl_n < {sn}) "
        + (f"{out} = {out} + ocannl_acc[i][j];" if g.add else f"{out} = ocannl_acc[i][j];"),
        "      }",
        "    }",
        "  }",
    ]
    return total * THREADS, lines


__all__ = ["ENV", "Gemm", "mode", "plan", "render"]
