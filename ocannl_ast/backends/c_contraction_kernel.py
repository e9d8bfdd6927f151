"""C text of the contraction kernel (a packed, register-blocked GEMM over offset tables).

Stage: backend. `kernel_c(T, p)` returns the definitions a routine using
`c_contraction` needs, for the element type `T` ("float"/"double") and suffix `p`
("f"/"d"). The kernel computes ``c[cm[i] + cn[j]] (= or +=) sum_k a[am[i] + ak[k]] *
b[bk[k] + bn[j]]`` where the six offset tables are mixed-radix offsets of the loop symbols
grouped into M, N and K, so any strides, axis orders, transposes and im2col-style
(convolution) windows go through the same packing. Blocking: panels of B (KC x NC) and of A
(MC x KC) are packed into aligned local buffers, zero-padded to whole micro-tiles; the
micro-kernel keeps an MR x NR tile in vector registers (GCC vector extensions; the width
follows ``__AVX512F__`` / ``__AVX__``). Only the micro-kernel compiles with FMA
contraction (``optimize("fp-contract=fast")``); everything else keeps -ffp-contract=off.
With OpenMP, M (or N) is split into one range of whole tiles per thread; each C tile is
computed by one thread in the same order, so results do not depend on the thread count.
"""

from __future__ import annotations

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
typedef OCK_T ocannl_mm_v_SFX __attribute__((vector_size(OCK_VB)));
#define OCK_VL_SFX ((int64_t)(OCK_VB / sizeof(OCK_T)))
#define OCK_NR_SFX (2 * OCK_VL_SFX)
#define OCK_NC_SFX (OCK_NR_SFX * OCK_NC_TILES)

/* ct[MR][NR] = sum_k ap[k][MR] (x) bp[k][NR]: FMA contraction in this function only. */
__attribute__((optimize("fp-contract=fast")))
static void ocannl_mm_micro_SFX(int64_t kc, const OCK_T* restrict ap, const OCK_T* restrict bp,
                          OCK_T* restrict ct) {
  ocannl_mm_v_SFX acc[OCK_MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < OCK_MR; ++r) { acc[r][0] = (ocannl_mm_v_SFX){0}; acc[r][1] = (ocannl_mm_v_SFX){0}; }
  for (int64_t k = 0; k < kc; ++k) {
    ocannl_mm_v_SFX b0, b1;
    memcpy(&b0, bp + k * OCK_NR_SFX, sizeof b0);
    memcpy(&b1, bp + k * OCK_NR_SFX + OCK_VL_SFX, sizeof b1);
#pragma GCC unroll 16
    for (int r = 0; r < OCK_MR; ++r) {
      OCK_T a = ap[k * OCK_MR + r];
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < OCK_MR; ++r) {
    memcpy(ct + r * OCK_NR_SFX, &acc[r][0], sizeof acc[r][0]);
    memcpy(ct + r * OCK_NR_SFX + OCK_VL_SFX, &acc[r][1], sizeof acc[r][1]);
  }
}

typedef struct {
  int64_t m, n, k;
  const int64_t *am, *ak, *bk, *bn, *cm, *cn;
  const OCK_T *a2, *b2; /* optional third factor, multiplied into A's or B's panels */
  const int64_t *a2m, *a2k, *b2k, *b2n;
  int cn_unit; /* cn[j] == cn[0] + j for all j: contiguous stores */
} ocannl_mm_shape_SFX;

static void ocannl_mm_pack_a_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* restrict a,
                           OCK_T* restrict ap, int64_t i0, int64_t mc, int64_t p0,
                           int64_t kc) {
  for (int64_t ip = 0; ip < mc; ip += OCK_MR) {
    OCK_T* dst = ap + ip * kc;
    for (int r = 0; r < OCK_MR; ++r) {
      if (ip + r < mc && s->a2) {
        const OCK_T* row = a + s->am[i0 + ip + r];
        const OCK_T* row2 = s->a2 + s->a2m[i0 + ip + r];
        for (int64_t k = 0; k < kc; ++k)
          dst[k * OCK_MR + r] = row[s->ak[p0 + k]] * row2[s->a2k[p0 + k]];
      } else if (ip + r < mc) {
        const OCK_T* row = a + s->am[i0 + ip + r];
        for (int64_t k = 0; k < kc; ++k) dst[k * OCK_MR + r] = row[s->ak[p0 + k]];
      } else {
        for (int64_t k = 0; k < kc; ++k) dst[k * OCK_MR + r] = 0;
      }
    }
  }
}

static void ocannl_mm_pack_b_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* restrict b,
                           OCK_T* restrict dst, int64_t j0, int64_t nr, int64_t p0,
                           int64_t kc) {
  for (int64_t k = 0; k < kc; ++k) {
    const OCK_T* row = b + s->bk[p0 + k];
    OCK_T* d = dst + k * OCK_NR_SFX;
    if (s->b2) {
      const OCK_T* row2 = s->b2 + s->b2k[p0 + k];
      for (int64_t q = 0; q < nr; ++q) d[q] = row[s->bn[j0 + q]] * row2[s->b2n[j0 + q]];
    } else {
      for (int64_t q = 0; q < nr; ++q) d[q] = row[s->bn[j0 + q]];
    }
    for (int64_t q = nr; q < OCK_NR_SFX; ++q) d[q] = 0;
  }
}

static void ocannl_mm_store_SFX(const ocannl_mm_shape_SFX* s, OCK_T* restrict c, const OCK_T* restrict ct,
                          int64_t i0, int64_t mr, int64_t j0, int64_t nr, int add) {
  for (int64_t r = 0; r < mr; ++r) {
    const OCK_T* t = ct + r * OCK_NR_SFX;
    OCK_T* row = c + s->cm[i0 + r];
    if (s->cn_unit) {
      row += s->cn[j0];
      if (add) { for (int64_t q = 0; q < nr; ++q) row[q] += t[q]; }
      else { for (int64_t q = 0; q < nr; ++q) row[q] = t[q]; }
    } else if (add) {
      for (int64_t q = 0; q < nr; ++q) row[s->cn[j0 + q]] += t[q];
    } else {
      for (int64_t q = 0; q < nr; ++q) row[s->cn[j0 + q]] = t[q];
    }
  }
}

static void* ocannl_mm_alloc_SFX(int64_t elems) {
  size_t bytes = ((size_t)elems * sizeof(OCK_T) + 63) / 64 * 64;
  return aligned_alloc(64, bytes ? bytes : 64);
}

/* Rows [m0, m1) x columns [n0, n1) of the blocked GEMM, with this call's own packing
   buffers (no sharing: threads run it on disjoint ranges); nonzero when out of memory. */
static int ocannl_mm_block_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                               OCK_T* c, int accumulate, int64_t m0, int64_t m1, int64_t n0,
                               int64_t n1) {
  const int64_t ncb = n1 - n0 < OCK_NC_SFX ? n1 - n0 : OCK_NC_SFX;
  const int64_t mcb = m1 - m0 < OCK_MC ? m1 - m0 : OCK_MC;
  const int64_t kcb = s->k < OCK_KC ? s->k : OCK_KC;
  OCK_T* bpk = ocannl_mm_alloc_SFX((ncb + OCK_NR_SFX) * kcb);
  OCK_T* apk = ocannl_mm_alloc_SFX((mcb + OCK_MR) * kcb);
  OCK_T ct[OCK_MR * OCK_NR_SFX] __attribute__((aligned(64)));
  if (!bpk || !apk) { free(bpk); free(apk); return 1; }
  for (int64_t j0 = n0; j0 < n1; j0 += ncb) {
    const int64_t nc = n1 - j0 < ncb ? n1 - j0 : ncb;
    for (int64_t p0 = 0; p0 < s->k; p0 += kcb) {
      const int64_t kc = s->k - p0 < kcb ? s->k - p0 : kcb;
      const int add = accumulate || p0 > 0;
      for (int64_t jp = 0; jp < nc; jp += OCK_NR_SFX) {
        const int64_t nr = nc - jp < OCK_NR_SFX ? nc - jp : OCK_NR_SFX;
        ocannl_mm_pack_b_SFX(s, b, bpk + jp * kc, j0 + jp, nr, p0, kc);
      }
      for (int64_t i0 = m0; i0 < m1; i0 += mcb) {
        const int64_t mc = m1 - i0 < mcb ? m1 - i0 : mcb;
        ocannl_mm_pack_a_SFX(s, a, apk, i0, mc, p0, kc);
        for (int64_t jp = 0; jp < nc; jp += OCK_NR_SFX) {
          const int64_t nr = nc - jp < OCK_NR_SFX ? nc - jp : OCK_NR_SFX;
          for (int64_t ip = 0; ip < mc; ip += OCK_MR) {
            const int64_t mr = mc - ip < OCK_MR ? mc - ip : OCK_MR;
            ocannl_mm_micro_SFX(kc, apk + ip * kc, bpk + jp * kc, ct);
            ocannl_mm_store_SFX(s, c, ct, i0 + ip, mr, j0 + jp, nr, add);
          }
        }
      }
    }
  }
  free(bpk);
  free(apk);
  return 0;
}

/* The GEMM: with threads, M (or N, when it has more tiles) is split into one contiguous
   range of whole tiles per thread, each packed and computed independently (no barrier). */
static int ocannl_mm_gemm_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                              OCK_T* c, int accumulate, int nthreads) {
  const int64_t mt = (s->m + OCK_MR - 1) / OCK_MR, nt = (s->n + OCK_NR_SFX - 1) / OCK_NR_SFX;
  const int split_m = mt >= nt;
  const int64_t tiles = split_m ? mt : nt, step = split_m ? OCK_MR : OCK_NR_SFX;
  const int64_t total = split_m ? s->m : s->n;
  const int parts = nthreads < tiles ? nthreads : (int)tiles;
  int err = 0;
#pragma omp parallel for num_threads(parts) schedule(static) reduction(| : err) if (parts > 1)
  for (int t = 0; t < parts; ++t) {
    const int64_t lo = tiles * t / parts * step, hi0 = tiles * (t + 1) / parts * step;
    const int64_t hi = hi0 < total ? hi0 : total;
    err |= split_m ? ocannl_mm_block_SFX(s, a, b, c, accumulate, lo, hi, 0, s->n)
                   : ocannl_mm_block_SFX(s, a, b, c, accumulate, 0, s->m, lo, hi);
  }
  return err;
}

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

/* One contraction. d: nm, nn, nk, then per M symbol (extent, a, a2, c strides), per N
   symbol (extent, b, b2, c strides), per K symbol (extent, a, a2, b, b2 strides). */
static int ocannl_mm_run_SFX(const OCK_T* a, const OCK_T* a2, const OCK_T* b, const OCK_T* b2,
                             OCK_T* c, int accumulate, int nthreads, const int64_t* d) {
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
  const int64_t m = size[0], n = size[1], k = size[2];
  int64_t* t = malloc(sizeof(int64_t) * (size_t)(3 * m + 3 * n + 4 * k));
  if (!t) return 1;
  int64_t* tab[10] = {t, t + m, t + 2 * m, t + 3 * m, t + 3 * m + n, t + 3 * m + 2 * n,
                      t + 3 * m + 3 * n, t + 3 * m + 3 * n + k, t + 3 * m + 3 * n + 2 * k,
                      t + 3 * m + 3 * n + 3 * k};
  for (int w = 0; w < 3; ++w) ocannl_mm_offsets_SFX(tab[w], nm, e[0], st[0][w]);
  for (int w = 0; w < 3; ++w) ocannl_mm_offsets_SFX(tab[3 + w], nn, e[1], st[1][w]);
  for (int w = 0; w < 4; ++w) ocannl_mm_offsets_SFX(tab[6 + w], nk, e[2], st[2][w]);
  /* tab: am a2m cm | bn b2n cn | ak a2k bk b2k */
  ocannl_mm_shape_SFX s = {m, n, k, tab[0], tab[6], tab[8], tab[3], tab[2], tab[5],
                           a2, b2, tab[1], tab[7], tab[9], tab[4], 1};
  for (int64_t j = 1; j < n; ++j) s.cn_unit &= s.cn[j] == s.cn[0] + j;
  int rc = ocannl_mm_gemm_SFX(&s, a, b, c, accumulate, nthreads);
  free(t);
  return rc;
}
"""


def kernel_c(type_name: str, suffix: str) -> list[str]:
    """The kernel's C definitions for one element type. Example: ``kernel_c("float", "f")``."""
    text = _KERNEL.replace("_SFX", "_" + suffix)
    return [f"#define OCK_T {type_name}", *text.strip("\n").splitlines(), "#undef OCK_T", ""]
