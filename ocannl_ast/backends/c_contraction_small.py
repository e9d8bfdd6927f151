"""C text of the contraction kernel's small path (`c_contraction_kernel` splices it in
before the GEMM driver): B packed once into one contiguous K x 2VL panel per column tile
(read in place instead when it is small, contiguous and whole vectors), A read in place
through its offset tables (a third factor on A multiplied in first), C written directly
from the registers.

Stage: backend. Input: none (a constant). Output: `SMALL_PATH`, C text in the kernel's
``_SFX`` template form (see `c_contraction_kernel.kernel_c`).
"""

from __future__ import annotations

SMALL_PATH = r"""
/* ---- small problems: B packed once, A read in place, C written directly ----
   Same arithmetic per element as the blocked path (per K block: acc = 0; acc =
   ocannl_mm_fma(acc, a, b) in k order; c = acc or c += acc), so the two give the same bits. */
#define OCK_SVL OCK_VL_SFX
#ifndef OCK_SMALL_DIRECT
/* Largest B (bytes) read in place, without packing: beyond, rows far apart in memory
   crowd a few cache sets, so B is packed into one contiguous K x 2VL panel per tile. */
#define OCK_SMALL_DIRECT 8192
#endif
/* Whether B is read in place: no third factor, contiguous rows, N whole vectors. */
static int ocannl_mm_direct_b_SFX(const ocannl_mm_shape_SFX* s) {
  return !s->b2 && s->bn_unit && s->n % OCK_SVL == 0;
}

/* Rows i0..i0+rows of C, columns j0..j0+nv*VL; B's row k of these columns at bt + brow[k]
   (a packed panel's, or B's own); rows, nv constant. */
__attribute__((always_inline))
static inline void ocannl_mm_stile_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a,
                                       const OCK_T* bt, const int64_t* restrict brow, OCK_T* c,
                                       int add, int64_t i0, int rows, int64_t j0, int nv) {
  ocannl_mm_v_SFX acc[OCK_MR][2];
  const OCK_T* ar[OCK_MR];
#pragma GCC unroll 16
  for (int r = 0; r < rows; ++r) {
    ar[r] = a + s->am[i0 + r];
    acc[r][0] = (ocannl_mm_v_SFX){0};
    acc[r][1] = (ocannl_mm_v_SFX){0};
  }
  for (int64_t k = 0; k < s->k; ++k) {
    const int64_t o = s->ak[k];
    ocannl_mm_v_SFX bv[2];
#pragma GCC unroll 2
    for (int v = 0; v < nv; ++v) memcpy(&bv[v], bt + brow[k] + v * OCK_SVL, sizeof bv[v]);
#pragma GCC unroll 16
    for (int r = 0; r < rows; ++r) {
      const OCK_T x = ar[r][o];
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

/* One strip of `rows` rows over all columns: tiles of 2 vectors, the last one of 1. The
   tile of columns j0.. reads B from bsrc + j0 (B read in place: ldp 0) or from its packed
   panel, bsrc + (j0 / (2 VL)) * ldp. */
__attribute__((always_inline))
static inline void ocannl_mm_strip_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a,
                                       const OCK_T* bsrc, const int64_t* restrict brow,
                                       int64_t np, int64_t ldp, OCK_T* c, int add, int64_t i0,
                                       int rows) {
  int64_t j0 = 0;
  for (; np - j0 >= 2 * OCK_SVL; j0 += 2 * OCK_SVL)
    ocannl_mm_stile_SFX(s, a, ldp ? bsrc + j0 / (2 * OCK_SVL) * ldp : bsrc + j0, brow, c, add,
                        i0, rows, j0, 2);
  if (j0 < np)
    ocannl_mm_stile_SFX(s, a, ldp ? bsrc + j0 / (2 * OCK_SVL) * ldp : bsrc + j0, brow, c, add,
                        i0, rows, j0, 1);
}

/* Every strip of rows (OCK_MR, OCK_MR / 2, a pair, then single rows) of one K block. */
__attribute__((always_inline))
static inline void ocannl_mm_rows_SFX(const ocannl_mm_shape_SFX* sk, const OCK_T* a,
                                      const OCK_T* bsrc, const int64_t* restrict brow,
                                      int64_t np, int64_t ldp, OCK_T* c, int add) {
  int64_t i0 = 0;
  for (; sk->m - i0 >= OCK_MR; i0 += OCK_MR)
    ocannl_mm_strip_SFX(sk, a, bsrc, brow, np, ldp, c, add, i0, OCK_MR);
  for (; sk->m - i0 >= OCK_MR / 2; i0 += OCK_MR / 2)
    ocannl_mm_strip_SFX(sk, a, bsrc, brow, np, ldp, c, add, i0, OCK_MR / 2);
  if (OCK_MR / 2 > 2 && sk->m - i0 >= 2) {
    ocannl_mm_strip_SFX(sk, a, bsrc, brow, np, ldp, c, add, i0, 2);
    i0 += 2;
  }
  for (; i0 < sk->m; ++i0) ocannl_mm_strip_SFX(sk, a, bsrc, brow, np, ldp, c, add, i0, 1);
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

/* B's columns j0..j0+w (w <= 2VL) into a K x 2VL panel (zero-padded): as the blocked path
   packs it, or, when B's K offsets are consecutive and its N ones are not (a transposed B,
   e.g. attention's keys in q k^T), column by column, each a contiguous run of B. */
static void ocannl_mm_panel_b_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* restrict b,
                                  OCK_T* restrict dst, int64_t j0, int64_t w) {
  const int64_t nr = 2 * OCK_SVL, kk = s->k;
  int runs = !s->b2 && !s->bn_unit;
  for (int64_t k = 1; k < kk && runs; ++k) runs = s->bk[k] == s->bk[0] + k;
  if (!runs) {
    ocannl_mm_pack_b_SFX(s, b, dst, j0, w, 0, kk, nr);
    return;
  }
  for (int64_t q = 0; q < w; ++q) {
    const OCK_T* restrict col = b + s->bn[j0 + q] + s->bk[0];
    for (int64_t k = 0; k < kk; ++k) dst[k * nr + q] = col[k];
  }
  for (int64_t k = 0; k < kk; ++k)
    for (int64_t q = w; q < nr; ++q) dst[k * nr + q] = 0;
}

/* The small path: B's K x 2VL panels on the stack (heap beyond OCK_SMALL_STACK bytes; nonzero
   when out of memory), then strips of OCK_MR, OCK_MR / 2 and single rows. B is read in place
   (no packing) when its rows are contiguous, N is whole vectors and it is within
   OCK_SMALL_DIRECT bytes (the loads are the same values, so the same bits). Packed panels:
   the transformer's 512 x 256 x 64 products ~15% faster than B's rows read in place. K runs
   in blocks of OCK_KC as in the blocked path (each block summed from 0 in registers, then
   stored or added to C), so the bits are the blocked path's at every K. */
__attribute__((noinline))
static int ocannl_mm_small_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                               OCK_T* c, int accumulate) {
  const int64_t pack_rows = (int64_t)(OCK_A2_PACK / sizeof(OCK_T)) / (s->k > 0 ? s->k : 1);
  if (s->a2 && s->m > pack_rows && s->m > 1) {
    /* A third factor on a large A: strips of rows whose products fit OCK_A2_PACK bytes,
       each computed alone (a row's sums do not depend on the rows beside it) */
    const int64_t step = pack_rows > 0 ? pack_rows : 1;
    for (int64_t i0 = 0; i0 < s->m; i0 += step) {
      ocannl_mm_shape_SFX sr = *s;
      sr.m = s->m - i0 < step ? s->m - i0 : step;
      sr.am = s->am + i0, sr.a2m = s->a2m + i0, sr.cm = s->cm + i0;
      if (ocannl_mm_small_SFX(&sr, a, b, c, accumulate)) return 1;
    }
    return 0;
  }
  if (s->a2) {
    /* A third factor on A: the products a * a2 (the values the blocked path packs) into an
       M x K array first, then the two-factor path over it (measured ~2x faster than
       multiplying them in inside the tile loop; one copy of the tile code to compile) */
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
  const int64_t nr = 2 * OCK_SVL, npp = (s->n + nr - 1) / nr * nr;
  const int direct = ocannl_mm_direct_b_SFX(s) &&
                     s->k * s->n <= (int64_t)(OCK_SMALL_DIRECT / sizeof(OCK_T));
  const int64_t ldp = direct ? 0 : s->k * nr; /* packed: one K x 2VL panel per tile */
  const int on_stack = direct || s->k * npp <= (int64_t)(OCK_SMALL_STACK / sizeof(OCK_T));
  OCK_T* bp = on_stack ? local : ocannl_mm_alloc_SFX(s->k * npp);
  if (!bp) return 1;
  const OCK_T* bsrc = direct ? b + s->bn[0] : bp;
  if (!direct && !s->b2 && s->bn_unit) {
    /* contiguous rows: packed row by row, each row of B read in order (panel by panel
       read one 64-byte piece of every row per panel: in a training step, where B is rarely
       in cache, that waited on memory for each row) */
    const int64_t whole = s->n / nr * nr;
    for (int64_t k = 0; k < s->k; ++k) {
      const OCK_T* restrict row = b + s->bk[k] + s->bn[0];
      OCK_T* restrict d = bp + k * nr;
      for (int64_t j0 = 0; j0 < whole; j0 += nr) ocannl_mm_copy_nr_SFX(d + j0 / nr * ldp, row + j0);
      if (whole < s->n) {
        OCK_T* restrict e = d + whole / nr * ldp;
        for (int64_t q = 0; q < nr; ++q) e[q] = whole + q < s->n ? row[whole + q] : 0;
      }
    }
  } else if (!direct) {
    for (int64_t j0 = 0; j0 < s->n; j0 += nr)
      ocannl_mm_panel_b_SFX(s, b, bp + j0 / nr * ldp, j0, s->n - j0 < nr ? s->n - j0 : nr);
  }
  for (int64_t p0 = 0; p0 < s->k; p0 += OCK_KC) {
    ocannl_mm_shape_SFX sk = *s;
    sk.k = s->k - p0 < OCK_KC ? s->k - p0 : OCK_KC;
    sk.ak = s->ak + p0;
    for (int64_t k = 0; k < sk.k; ++k) brow[k] = direct ? s->bk[p0 + k] : (p0 + k) * nr;
    ocannl_mm_rows_SFX(&sk, a, bsrc, brow, np, ldp, c, accumulate || p0 > 0);
  }
  if (!on_stack) free(bp);
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
