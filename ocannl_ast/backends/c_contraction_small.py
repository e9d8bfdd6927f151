"""C text of the contraction kernel's small path (`c_contraction_kernel` splices it in
before the GEMM driver): B packed once into micro-panels of two vectors (or read in place
when A has few rows), A read in place through its offset tables (a third factor on A
multiplied in first), C written directly from the registers.

Stage: backend. Input: none (a constant). Output: `SMALL_PATH`, C text in the kernel's
``_SFX`` template form (see `c_contraction_kernel.kernel_c`).
"""

from __future__ import annotations

SMALL_PATH = r"""
/* ---- small problems: B packed once, A read in place, C written directly ----
   Same arithmetic per element as the blocked path (per K block: acc = 0; acc =
   ocannl_mm_fma(acc, a, b) in k order; c = acc or c += acc), so the two give the same bits. */
#define OCK_SVL OCK_VL_SFX
#ifndef OCK_SMALL_PANEL_ROWS
#define OCK_SMALL_PANEL_ROWS 64 /* rows of A from which B is packed into micro-panels */
#endif
/* Whether B is read in place: no third factor, contiguous rows, N whole vectors. */
static int ocannl_mm_direct_b_SFX(const ocannl_mm_shape_SFX* s) {
  return !s->b2 && s->bn_unit && s->n % OCK_SVL == 0;
}

/* Rows i0..i0+rows of C, columns j0..j0+nv*VL; rows, nv constant. B's row k of these
   columns at bp + brow[k] + j0 * jmul (jmul 1: B's rows in place or packed K x np; jmul K:
   packed in micro-panels of 2 vectors, K x NR each). */
__attribute__((always_inline))
static inline void ocannl_mm_stile_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a,
                                       const OCK_T* bp, const int64_t* restrict brow, OCK_T* c,
                                       int add, int64_t i0, int rows, int64_t j0, int nv,
                                       int64_t jmul, int two) {
  ocannl_mm_v_SFX acc[OCK_MR][2];
  const OCK_T* ar[OCK_MR];
  const OCK_T* ar2[OCK_MR];
#pragma GCC unroll 16
  for (int r = 0; r < rows; ++r) {
    ar[r] = a + s->am[i0 + r];
    ar2[r] = two ? s->a2 + s->a2m[i0 + r] : a;
    acc[r][0] = (ocannl_mm_v_SFX){0};
    acc[r][1] = (ocannl_mm_v_SFX){0};
  }
  const OCK_T* bj = bp + j0 * jmul;
  for (int64_t k = 0; k < s->k; ++k) {
    const int64_t o = s->ak[k], o2 = two ? s->a2k[k] : 0;
    ocannl_mm_v_SFX bv[2];
#pragma GCC unroll 2
    for (int v = 0; v < nv; ++v) memcpy(&bv[v], bj + brow[k] + v * OCK_SVL, sizeof bv[v]);
#pragma GCC unroll 16
    for (int r = 0; r < rows; ++r) {
      /* with a third factor, its product first: the value the blocked path packs */
      const OCK_T x = two ? ar[r][o] * ar2[r][o2] : ar[r][o];
#pragma GCC unroll 2
      for (int v = 0; v < nv; ++v) acc[r][v] = ocannl_mm_fma_SFX(acc[r][v], x, bv[v]);
    }
  }
  const int64_t w = s->n - j0 < nv * OCK_SVL ? s->n - j0 : nv * OCK_SVL;
#pragma GCC unroll 16
  for (int r = 0; r < rows; ++r) {
    OCK_T* row = c + s->cm[i0 + r];
    if (s->cn_unit && w == nv * OCK_SVL) {
      row += s->cn[j0];
#pragma GCC unroll 2
      for (int v = 0; v < nv; ++v) {
        ocannl_mm_v_SFX t = acc[r][v];
        if (add) {
          memcpy(&t, row + v * OCK_SVL, sizeof t);
          t += acc[r][v];
        }
        memcpy(row + v * OCK_SVL, &t, sizeof t);
      }
    } else {
      OCK_T t[2 * OCK_SVL];
      memcpy(t, &acc[r][0], sizeof acc[r][0]);
      memcpy(t + OCK_SVL, &acc[r][1], sizeof acc[r][1]);
      if (add) { for (int64_t q = 0; q < w; ++q) row[s->cn[j0 + q]] += t[q]; }
      else { for (int64_t q = 0; q < w; ++q) row[s->cn[j0 + q]] = t[q]; }
    }
  }
}

/* One strip of `rows` rows over all columns: tiles of 2 vectors, the last one of 1. */
__attribute__((always_inline))
static inline void ocannl_mm_strip_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a,
                                       const OCK_T* bp, const int64_t* restrict brow,
                                       int64_t np, OCK_T* c, int add, int64_t i0, int rows,
                                       int64_t jmul, int two) {
  int64_t j0 = 0;
  for (; np - j0 >= 2 * OCK_SVL; j0 += 2 * OCK_SVL)
    ocannl_mm_stile_SFX(s, a, bp, brow, c, add, i0, rows, j0, 2, jmul, two);
  if (j0 < np) ocannl_mm_stile_SFX(s, a, bp, brow, c, add, i0, rows, j0, 1, jmul, two);
}

/* Every strip of rows (OCK_MR, OCK_MR / 2, then single rows) of one K block; `two`: A has
   a third factor (a constant in each inlined copy). */
__attribute__((always_inline))
static inline void ocannl_mm_rows_SFX(const ocannl_mm_shape_SFX* sk, const OCK_T* a,
                                      const OCK_T* bsrc, const int64_t* restrict brow,
                                      int64_t np, OCK_T* c, int add, int64_t jmul, int two) {
  int64_t i0 = 0;
  for (; sk->m - i0 >= OCK_MR; i0 += OCK_MR)
    ocannl_mm_strip_SFX(sk, a, bsrc, brow, np, c, add, i0, OCK_MR, jmul, two);
  for (; sk->m - i0 >= OCK_MR / 2; i0 += OCK_MR / 2)
    ocannl_mm_strip_SFX(sk, a, bsrc, brow, np, c, add, i0, OCK_MR / 2, jmul, two);
  for (; i0 < sk->m; ++i0) ocannl_mm_strip_SFX(sk, a, bsrc, brow, np, c, add, i0, 1, jmul, two);
}

/* Whether a2's offset tables are a's and a's cells over M x K are 0 .. M K - 1 (each once):
   then the products a * a2 are one unit-stride loop, read through a's own tables. */
static int ocannl_mm_same_dense_SFX(const ocannl_mm_shape_SFX* s) {
  int64_t hi = 0, lo = 0;
  for (int64_t i = 0; i < s->m; ++i) {
    if (s->am[i] != s->a2m[i]) return 0;
    hi = s->am[i] > hi ? s->am[i] : hi;
    lo = s->am[i] < lo ? s->am[i] : lo;
  }
  int64_t hk = 0, lk = 0;
  for (int64_t k = 0; k < s->k; ++k) {
    if (s->ak[k] != s->a2k[k]) return 0;
    hk = s->ak[k] > hk ? s->ak[k] : hk;
    lk = s->ak[k] < lk ? s->ak[k] : lk;
  }
  /* the offsets lie in [0, M K): a product per cell of that span (all between two read
     cells, so readable) covers every (i, k) read, at the cost of the tables' own loop */
  return lo + lk == 0 && hi + hk + 1 == s->m * s->k;
}

/* ap[i][k] = a[am[i] + ak[k]] * a2[a2m[i] + a2k[k]] (a K x M array, row-major): its own
   function (inlined into the small path, gcc spilled every pointer of this loop), with a
   unit-stride loop when both factors' K offsets are 0, 1, 2, ... (it vectorizes). */
__attribute__((noinline))
static void ocannl_mm_times_a2_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a,
                                   OCK_T* restrict ap) {
  const int64_t* restrict ak = s->ak;
  const int64_t* restrict a2k = s->a2k;
  const int64_t kk = s->k;
  int unit = 1;
  for (int64_t k = 0; k < kk; ++k) unit &= ak[k] == k && a2k[k] == k;
  for (int64_t i = 0; i < s->m; ++i) {
    const OCK_T* restrict row = a + s->am[i];
    const OCK_T* restrict row2 = s->a2 + s->a2m[i];
    OCK_T* restrict dst = ap + i * kk;
    if (unit) { for (int64_t k = 0; k < kk; ++k) dst[k] = row[k] * row2[k]; }
    else { for (int64_t k = 0; k < kk; ++k) dst[k] = row[ak[k]] * row2[a2k[k]]; }
  }
}

/* The small path: B packed into K x NR micro-panels on the stack (in the thread's workspace
   beyond OCK_SMALL_STACK bytes; nonzero when out of memory), then strips of OCK_MR,
   OCK_MR / 2 and single rows. B is read in place (no packing) when its rows are contiguous,
   N is whole vectors and A has fewer than OCK_SMALL_PANEL_ROWS rows (the loads are the same
   values, so the same bits). K runs in blocks of OCK_KC as in the blocked path (each block
   summed from 0 in registers, then stored or added to C), so the bits are the blocked path's
   at every K. */
__attribute__((noinline))
static int ocannl_mm_small_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                               OCK_T* c, int accumulate) {
  if (s->a2 && s->m * s->k <= (int64_t)(OCK_A2_PACK / sizeof(OCK_T))) {
    /* A third factor on A: the products a * a2 (the values the blocked path packs) into an
       M x K array first, then the two-factor path over it (measured ~2x faster than
       multiplying them in inside the tile loop). */
    OCK_T* ap = ocannl_mm_alloc_SFX(s->m * s->k);
    int64_t* tab = malloc(sizeof(int64_t) * (size_t)(s->m + s->k));
    int rc = 1;
    if (ap && tab) {
      ocannl_mm_shape_SFX s2 = *s;
      s2.a2 = 0;
      if (ocannl_mm_same_dense_SFX(s)) { /* a and a2 laid out alike over M x K cells */
        const OCK_T* restrict x = a;
        const OCK_T* restrict y = s->a2;
        for (int64_t q = 0; q < s->m * s->k; ++q) ap[q] = x[q] * y[q];
      } else {
        ocannl_mm_times_a2_SFX(s, a, ap);
        for (int64_t i = 0; i < s->m; ++i) tab[i] = i * s->k;
        for (int64_t k = 0; k < s->k; ++k) tab[s->m + k] = k;
        s2.am = tab;
        s2.ak = tab + s->m;
      }
      rc = ocannl_mm_small_SFX(&s2, ap, b, c, accumulate);
    }
    free(ap);
    free(tab);
    return rc;
  }
  OCK_T local[OCK_SMALL_STACK / sizeof(OCK_T)] __attribute__((aligned(64)));
  int64_t brow[OCK_KC];
  const int64_t np = (s->n + OCK_SVL - 1) / OCK_SVL * OCK_SVL;
  /* B in place only for few rows of A: with more, its strided rows (the 16 columns of a
     tile in as many cache lines as K, often in few L1 sets) were read from L2 per strip */
  const int direct = ocannl_mm_direct_b_SFX(s) && s->m < OCK_SMALL_PANEL_ROWS;
  const int64_t npp = (s->n + OCK_NR_SFX - 1) / OCK_NR_SFX * OCK_NR_SFX; /* whole panels */
  const int on_stack = direct || s->k * npp <= (int64_t)(OCK_SMALL_STACK / sizeof(OCK_T));
  /* the workspace up to the blocked path's size (kept per thread), beyond it for this call */
  const int kept = s->k * npp <= OCK_WS_MAX_SFX;
  OCK_T* bp = on_stack ? local : kept ? ocannl_mm_workspace_SFX(s->k * npp)
                                      : ocannl_mm_alloc_SFX(s->k * npp);
  if (!bp) return 1;
  const OCK_T* bsrc = direct ? b + s->bn[0] : bp;
  if (!direct) ocannl_mm_pack_bp_SFX(s, b, bp, 0, s->n, 0, s->k); /* K x NR micro-panels */
  const int64_t jmul = direct ? 1 : s->k;
  for (int64_t p0 = 0; p0 < s->k; p0 += OCK_KC) {
    ocannl_mm_shape_SFX sk = *s;
    sk.k = s->k - p0 < OCK_KC ? s->k - p0 : OCK_KC;
    sk.ak = s->ak + p0;
    if (s->a2) sk.a2k = s->a2k + p0;
    for (int64_t k = 0; k < sk.k; ++k) brow[k] = direct ? s->bk[p0 + k] : (p0 + k) * OCK_NR_SFX;
    const int add = accumulate || p0 > 0;
    if (s->a2) ocannl_mm_rows_SFX(&sk, a, bsrc, brow, np, c, add, jmul, 1);
    else ocannl_mm_rows_SFX(&sk, a, bsrc, brow, np, c, add, jmul, 0);
  }
  if (!on_stack && !kept) free(bp);
  return 0;
}

/* Whether the small path takes this problem: B's K x N panel (N rounded up to whole
   vectors; packed or read in place) within OCK_SMALL_BYTES. */
static int ocannl_mm_is_small_SFX(const ocannl_mm_shape_SFX* s) {
  const int64_t np = (s->n + OCK_SVL - 1) / OCK_SVL * OCK_SVL;
  const int64_t limit = s->k <= OCK_KC ? OCK_SMALL_BYTES : OCK_SMALL_BYTES < OCK_SMALL_DEEP
                                                            ? OCK_SMALL_BYTES : OCK_SMALL_DEEP;
  return s->k * np <= (int64_t)(limit / sizeof(OCK_T));
}
#undef OCK_SVL
"""
