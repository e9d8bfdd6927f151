"""C text of the contraction kernel (a packed, register-blocked GEMM over offset tables).

Stage: backend. `kernel_c(T, p)` returns the definitions a routine using
`c_contraction` needs, for the element type `T` ("float"/"double") and suffix `p`
("f"/"d"). The kernel computes ``c[cm[i] + cn[j]] (= or +=) sum_k a[am[i] + ak[k]] *
b[bk[k] + bn[j]]`` where the six offset tables are mixed-radix offsets of the loop symbols
grouped into M, N and K, so any strides, axis orders, transposes and im2col-style
(convolution) windows go through the same packing. Blocking (`c_contraction_block`): B's
KC x NC blocks are packed row by row into micro-panels of NR columns and A's MC x KC blocks
into micro-panels of MR rows, in one 64-byte aligned workspace per thread kept between calls;
the micro-kernel keeps an MR x NR tile in vector registers (GCC vector extensions; the width
follows ``__AVX512F__`` / ``__AVX__``) and writes whole tiles straight to C. All
multiply-adds are explicit (`ocannl_mm_fma`: the
x86 FMA builtin of that width under ``__FMA__`` / ``__AVX512F__``, else a product then a
sum under the global -ffp-contract=off), never left to gcc's FMA contraction, which depends
on the tuning: ``-mtune=znver*`` (``--param avoid-fma-max-bits=256``) keeps a loop-carried
``acc += x * b`` chain as a multiply and an add in some loops and fuses it in others, so the
small and blocked paths gave different bits on AMD CPUs with -march=native.
Problems on one thread whose B panel (K x N) is within OCK_SMALL_BYTES (OCK_SMALL_DEEP
when K spans several blocks) take the "small" path: B packed once (on the stack up to
OCK_SMALL_STACK bytes: no heap allocation for small problems), or read in place when its
rows are contiguous and N is whole vectors, A read in place through its offset tables (a
third factor on A multiplied into a scratch copy of A first, in strips of rows past
OCK_A2_PACK bytes: the products the blocked path packs), C
stored directly from the registers; per element it sums in the same order as the blocked path (K in blocks of
OCK_KC), so both give the same bits. (Measured faster than the blocked path at every size
it takes, from 20x16x16 to 4000x32x4096: A's packing costs more than it saves.) A product
with batch loops is one call (`ocannl_mm_runb`): the offset tables are built once and the
GEMM runs per batch cell.
With OpenMP, M (or N) is split into one range of whole tiles per thread; each C tile is
computed by one thread in the same order, so results do not depend on the thread count.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ocannl_ast.backends.c_contraction_block import BLOCK_PATH
from ocannl_ast.backends.c_contraction_small import SMALL_PATH
from ocannl_ast.backends.c_contraction_threads import THREADS_C

_KERNEL = r"""
/* ---- contraction kernel (ocannl_ast backends/c_contraction.py) ---- */
#include <stdlib.h>
#include <string.h>
#ifndef OCK_VB
#if defined(__AVX512F__)
#define OCK_VB 64
#define OCK_MR 8
#elif defined(__AVX__)
#define OCK_VB 32
#define OCK_MR 6
#else
#define OCK_VB 16
#define OCK_MR 4
#endif
#define OCK_KC 256
#define OCK_MC (OCK_MR * 16)
#define OCK_NC_TILES 64
#endif
#define OCK_TAB_STACK 2048 /* offset-table entries kept on the stack */
#define OCK_SMALL_STACK 32768 /* bytes of the small path's B panel kept on the stack */
/* Largest B panel (bytes) of the small path when K spans several blocks (B is then re-read
   per K block and row strip: measured slower than the blocked path at 1024^3 and at
   M 64 N 256 K 512 -- a weight gradient, 373 vs 313 us --, faster at 512 x 64 x 512 and
   256^3) */
#ifndef OCK_SMALL_DEEP
#define OCK_SMALL_DEEP 262144
#endif
/* Most bytes of products of A with a third factor the small path computes at once (a
   larger A goes in strips of rows) */
#ifndef OCK_A2_PACK
#define OCK_A2_PACK 4194304
#endif
typedef OCK_T ocannl_mm_v_SFX __attribute__((vector_size(OCK_VB)));
#define OCK_VL_SFX ((int64_t)(OCK_VB / sizeof(OCK_T)))
#define OCK_NR_SFX (2 * OCK_VL_SFX)
#define OCK_NC_SFX (OCK_NR_SFX * OCK_NC_TILES)
#ifndef OCK_CAT3
#define OCK_CAT3_(a, b, c) a##b##c
#define OCK_CAT3(a, b, c) OCK_CAT3_(a, b, c)
#endif

/* acc + x * b in every lane. Explicit, so both paths (and every tile shape) round alike
   whatever gcc's contraction heuristics decide: one rounding (FMA builtin) where the target
   has FMA at this width, else a rounded product then a rounded sum (-ffp-contract=off). */
__attribute__((always_inline))
static inline ocannl_mm_v_SFX ocannl_mm_fma_SFX(ocannl_mm_v_SFX acc, OCK_T x, ocannl_mm_v_SFX b) {
  const ocannl_mm_v_SFX xv = x - (ocannl_mm_v_SFX){0}; /* x in every lane (x - 0 is x) */
#if OCK_VB == 64 && defined(__AVX512F__)
  /* all lanes (mask -1), _MM_FROUND_CUR_DIRECTION (4): what _mm512_fmadd_ps/pd pass */
  return OCK_CAT3(__builtin_ia32_vfmadd, OCK_PX, 512_mask)(xv, b, acc, -1, 4);
#elif OCK_VB == 32 && defined(__FMA__)
  return OCK_CAT3(__builtin_ia32_vfmadd, OCK_PX, 256)(xv, b, acc);
#elif OCK_VB == 16 && defined(__FMA__)
  return OCK_CAT3(__builtin_ia32_vfmadd, OCK_PX, )(xv, b, acc);
#else
  return acc + xv * b;
#endif
}

typedef struct {
  int64_t m, n, k;
  const int64_t *am, *ak, *bk, *bn, *cm, *cn;
  const OCK_T *a2, *b2; /* optional third factor, multiplied into A's or B's panels */
  const int64_t *a2m, *a2k, *b2k, *b2n;
  int cn_unit; /* cn[j] == cn[0] + j for all j: contiguous stores */
  int bn_unit; /* bn[j] == bn[0] + j for all j: contiguous B rows */
  int dry; /* team mode: this thread has no offset tables (out of memory): no work */
  int ak_unit; /* ak[k] == ak[0] + k for all k: contiguous rows of A */
} ocannl_mm_shape_SFX;

""" + BLOCK_PATH + SMALL_PATH + r"""

@THREADS@
/* Mixed-radix offsets: out[i] = sum_d stride[d] * digit_d(i) over the extents ext[0..nd). */
static int64_t ocannl_mm_offsets_SFX(int64_t* out, int nd, const int64_t* ext,
                               const int64_t* stride) {
  int64_t n = 1;
  out[0] = 0;
  for (int d = nd - 1; d >= 0; --d) {
    for (int64_t j = 1; j < ext[d]; ++j)
      for (int64_t i = 0; i < n; ++i) out[j * n + i] = out[i] + j * stride[d];
    n *= ext[d];
  }
  return n;
}

/* ocannl_mm_runb with the offset tables precomputed (d[0] < 0): d is -1, M, N, K, cn_unit,
   bn_unit, then the tables am [a2m] cm bn [b2n] cn ak [a2k] bk [b2k] (a2's and b2's only
   when that factor is given). No per-call setup: the same tables, so the same bits. */
static int ocannl_mm_runt_SFX(const OCK_T* a, const OCK_T* a2, const OCK_T* b,
                              const OCK_T* b2, OCK_T* c, int accumulate, int nthreads,
                              const int64_t* d, const int64_t* bt) {
  const int64_t m = d[1], n = d[2], k = d[3];
  const int64_t *t = d + 6, *am = t, *a2m = a2 ? t + m : 0;
  t += a2 ? 2 * m : m;
  const int64_t *cm = t, *bn = t + m, *b2n = b2 ? t + m + n : 0;
  t += b2 ? m + 2 * n : m + n;
  const int64_t *cn = t, *ak = t + n, *a2k = a2 ? t + n + k : 0;
  t += a2 ? n + 2 * k : n + k;
  const int64_t *bk = t, *b2k = b2 ? t + k : 0;
  ocannl_mm_shape_SFX s = {m, n, k, am, ak, bk, bn, cm, cn, a2, b2, a2m, a2k, b2k, b2n,
                           (int)d[4], (int)d[5], 0, 1};
  for (int64_t q = 1; q < k; ++q) s.ak_unit &= ak[q] == ak[0] + q;
  return bt && bt[0] ? ocannl_mm_batch_SFX(&s, a, b, c, accumulate, nthreads, bt)
                     : ocannl_mm_gemm_SFX(&s, a, b, c, accumulate, nthreads);
}

/* One contraction, once per cell of the batch group bt (NULL: none), the offset tables built
   once. d: nm, nn, nk, then per M symbol (extent, a, a2, c strides), per N symbol (extent,
   b, b2, c strides), per K symbol (extent, a, a2, b, b2 strides); or the tables themselves
   (d[0] < 0: `ocannl_mm_runt`). */
#ifndef OCK_RUN_LINKAGE
#define OCK_RUN_LINKAGE static
#endif
OCK_RUN_LINKAGE int ocannl_mm_runb_SFX(const OCK_T* a, const OCK_T* a2, const OCK_T* b,
                                       const OCK_T* b2, OCK_T* c, int accumulate,
                                       int nthreads, const int64_t* d, const int64_t* bt) {
  if (d[0] < 0) return ocannl_mm_runt_SFX(a, a2, b, b2, c, accumulate, nthreads, d, bt);
  const int nm = (int)d[0], nn = (int)d[1], nk = (int)d[2];
  const int64_t* g = d + 3;
  int64_t size[3] = {1, 1, 1}, e[3][8], st[3][4][8];
  const int counts[3] = {nm, nn, nk}, width[3] = {3, 3, 4};
  for (int grp = 0; grp < 3; ++grp)
    for (int i = 0; i < counts[grp]; ++i, g += 1 + width[grp]) {
      e[grp][i] = g[0];
      size[grp] *= g[0];
      for (int w = 0; w < width[grp]; ++w) st[grp][w][i] = g[1 + w];
    }
  int64_t m = size[0], n = size[1], k = size[2];
  const int64_t total = 3 * m + 3 * n + 4 * k;
  int64_t stack_tab[OCK_TAB_STACK];
  int64_t* t = total <= OCK_TAB_STACK ? stack_tab : malloc(sizeof(int64_t) * (size_t)total);
  const int dry = !t; /* a team thread without tables still takes part in the worksharing */
  if (dry && nthreads >= 0) return 1;
  if (dry) t = stack_tab, m = n = k = 0;
  int64_t* tab[10] = {t, t + m, t + 2 * m, t + 3 * m, t + 3 * m + n, t + 3 * m + 2 * n,
                      t + 3 * m + 3 * n, t + 3 * m + 3 * n + k, t + 3 * m + 3 * n + 2 * k,
                      t + 3 * m + 3 * n + 3 * k};
  /* tab: am a2m cm | bn b2n cn | ak a2k bk b2k (a2's and b2's only with that factor) */
  for (int w = 0; w < 3 && !dry; ++w)
    if (w != 1 || a2) ocannl_mm_offsets_SFX(tab[w], nm, e[0], st[0][w]);
  for (int w = 0; w < 3 && !dry; ++w)
    if (w != 1 || b2) ocannl_mm_offsets_SFX(tab[3 + w], nn, e[1], st[1][w]);
  for (int w = 0; w < 4 && !dry; ++w)
    if ((w != 1 || a2) && (w != 3 || b2)) ocannl_mm_offsets_SFX(tab[6 + w], nk, e[2], st[2][w]);
  ocannl_mm_shape_SFX s = {m, n, k, tab[0], tab[6], tab[8], tab[3], tab[2], tab[5],
                           a2, b2, tab[1], tab[7], tab[9], tab[4], 1, 1};
  for (int64_t j = 1; j < n; ++j) s.cn_unit &= s.cn[j] == s.cn[0] + j;
  for (int64_t j = 1; j < n; ++j) s.bn_unit &= s.bn[j] == s.bn[0] + j;
  s.ak_unit = 1;
  for (int64_t q = 1; q < k; ++q) s.ak_unit &= s.ak[q] == s.ak[0] + q;
  if (dry) s.m = size[0], s.n = size[1], s.k = size[2], s.dry = 1; /* same worksharing */
  int rc = bt && bt[0] ? ocannl_mm_batch_SFX(&s, a, b, c, accumulate, nthreads, bt)
                       : ocannl_mm_gemm_SFX(&s, a, b, c, accumulate, nthreads);
  if (t != stack_tab) free(t);
  return rc;
}

/* One contraction (ocannl_mm_runb without a batch group). */
OCK_RUN_LINKAGE int ocannl_mm_run_SFX(const OCK_T* a, const OCK_T* a2, const OCK_T* b,
                                      const OCK_T* b2, OCK_T* c, int accumulate,
                                      int nthreads, const int64_t* d) {
  return ocannl_mm_runb_SFX(a, a2, b, b2, c, accumulate, nthreads, d, 0);
}
"""


#: Most offset-table entries (all of one call's tables) the renderer writes into the source
#: as constants (`precomputed`) instead of the call building them each time: at 20 x 16 x 16
#: building them cost as much as the multiply-adds. Only for calls of at most
#: `PRECOMPUTED_MAX_WORK` multiply-adds (M N K): beyond, building them costs little.
PRECOMPUTED_MAX = 1024
PRECOMPUTED_MAX_WORK = 1 << 17


def mixed_radix(extents: Sequence[int], strides: Sequence[int]) -> list[int]:
    """``out[i] = sum_d strides[d] * digit_d(i)``, the last extent fastest: the offsets
    ``ocannl_mm_offsets`` builds. Example: ``mixed_radix([2, 3], [10, 1]) == [0, 1, 2, 10,
    11, 12]``."""
    out = [0]
    for e, s in zip(reversed(extents), reversed(strides), strict=True):
        out = [j * s + o for j in range(e) for o in out]
    return out


def precomputed(d: Sequence[int], has_a2: bool, has_b2: bool) -> list[int] | None:
    """The call's descriptor `d` (nm, nn, nk, then each symbol's extent and strides; see
    ``ocannl_mm_runb``) as its offset tables (-1, M, N, K, cn_unit, bn_unit, am [a2m] cm bn
    [b2n] cn ak [a2k] bk [b2k]), or None beyond `PRECOMPUTED_MAX` entries or
    `PRECOMPUTED_MAX_WORK` multiply-adds."""
    counts, widths, pos = d[:3], (3, 3, 4), 3
    groups: list[list[list[int]]] = []  # per group, per table: the tables' columns
    for count, width in zip(counts, widths, strict=True):
        rows = [list(d[pos + i * (1 + width):pos + (i + 1) * (1 + width)]) for i in range(count)]
        pos += count * (1 + width)
        groups.append([[r[0] for r in rows], *([r[1 + w] for r in rows] for w in range(width))])
    sizes = [math.prod(g[0]) for g in groups]
    used = [(0, 1), (0, 2) if has_a2 else None, (0, 3), (1, 1), (1, 2) if has_b2 else None,
            (1, 3), (2, 1), (2, 2) if has_a2 else None, (2, 3), (2, 4) if has_b2 else None]
    wanted = [u for u in used if u is not None]
    if (sum(sizes[g] for g, _ in wanted) > PRECOMPUTED_MAX
            or math.prod(sizes) > PRECOMPUTED_MAX_WORK):
        return None
    tables = {u: mixed_radix(groups[u[0]][0], groups[u[0]][u[1]]) for u in wanted}
    cn, bn = tables[(1, 3)], tables[(1, 1)]
    units = [int(all(t[j] == t[0] + j for j in range(len(t)))) for t in (cn, bn)]
    return [-1, *sizes, *units, *(x for u in wanted for x in tables[u])]


#: Largest packed B panel (bytes) of the small path, 4 MiB: the largest size measured (it was
#: still no slower than the blocked path there); 0 sends every problem through the blocked
#: path (the tests compare the two paths' bits).
SMALL_BYTES = 1 << 22

#: The x86 builtins' element suffix (``__builtin_ia32_vfmaddps256``) per C element type.
_PX = {"float": "ps", "double": "pd"}


#: The linkage of the kernel's entry point where a routine is compiled as several translation
#: units (`c_backend`): the unit holding the kernel exports it inside the shared object only.
SHARED_LINKAGE = '__attribute__((visibility("hidden")))'


def run_prototype(type_name: str, suffix: str) -> str:
    """The declarations of the kernel's entry points (`ocannl_mm_run_*`, and the batched
    `ocannl_mm_runb_*`) with `SHARED_LINKAGE`, for a translation unit calling the kernel
    defined in another. Example: ``run_prototype("float", "f")``."""
    t = type_name
    args = (f"const {t}* a, const {t}* a2, const {t}* b, const {t}* b2, {t}* c, "
            "int accumulate, int nthreads, const int64_t* d")
    return (f"{SHARED_LINKAGE} int ocannl_mm_run_{suffix}({args});\n"
            f"{SHARED_LINKAGE} int ocannl_mm_runb_{suffix}({args}, const int64_t* bt);")


def kernel_c(type_name: str, suffix: str) -> list[str]:
    """The kernel's C definitions for one element type. Example: ``kernel_c("float", "f")``."""
    text = _KERNEL.replace("@THREADS@", THREADS_C.strip("\n") + "\n")
    text = text.replace("_SFX", "_" + suffix)
    return [f"#define OCK_T {type_name}", f"#define OCK_PX {_PX[type_name]}",
            "#undef OCK_SMALL_BYTES", f"#define OCK_SMALL_BYTES {int(SMALL_BYTES)}",
            *text.strip("\n").splitlines(), "#undef OCK_PX", "#undef OCK_T", ""]
