"""C text of the contraction kernel's blocked path (`c_contraction_kernel` splices it in after
the shape type and before the small path): packing of A and B panels, the register-tile
micro-kernel and the loops over cache blocks.

Stage: backend. Input: none (a constant). Output: `BLOCK_PATH`, C text in the kernel's
``_SFX`` template form (see `c_contraction_kernel.kernel_c`).

Loop order (per thread, on its own range of rows or columns): columns in blocks of
OCK_NC_SFX, K in blocks of OCK_KC (B's KC x NC block packed once per block pair, in
micro-panels of OCK_NR_SFX columns: one micro-panel, 16 KiB in float, stays in L1 while
the rows run under it), rows in blocks of OCK_MC (A's MC x KC block packed once, it stays
in L2), then every micro-panel of B and, inside, every micro-panel of A: the OCK_MR x
OCK_NR_SFX tile of C summed over the K block in registers, in k order from 0, then stored
or added to C. A full tile with contiguous C columns is written straight from the registers
(its C rows prefetched before the K loop: C's cells come from L3 or memory, once per K
block); edge tiles go through a small array. The packing buffers are one 64-byte aligned
workspace per thread and element type, kept between calls (grown when a problem needs
more, at most (OCK_NC_SFX + OCK_MC + NR + MR) x OCK_KC elements: about 1.3 MiB in float):
no allocation per call, and the same addresses from call to call.
"""

from __future__ import annotations

BLOCK_PATH = r"""
/* ---- blocked path (c_contraction_block.py) ---- */
/* The blocked path's largest workspace (elements): B's block, A's block, alignment. */
#define OCK_WS_MAX_SFX ((OCK_NC_SFX + OCK_NR_SFX) * OCK_KC + (OCK_MC + OCK_MR) * OCK_KC + 64)
static _Thread_local OCK_T* ocannl_mm_ws_SFX; /* this thread's packing workspace */
static _Thread_local int64_t ocannl_mm_ws_cap_SFX; /* its size in elements */

static void* ocannl_mm_alloc_SFX(int64_t elems) {
  size_t bytes = ((size_t)elems * sizeof(OCK_T) + 63) / 64 * 64;
  return aligned_alloc(64, bytes ? bytes : 64);
}

/* This thread's workspace of at least `elems` elements (64-byte aligned), or NULL when
   out of memory. Kept between calls: the blocked path allocates only when it grows. */
static OCK_T* ocannl_mm_workspace_SFX(int64_t elems) {
  if (elems > ocannl_mm_ws_cap_SFX) {
    free(ocannl_mm_ws_SFX);
    ocannl_mm_ws_SFX = ocannl_mm_alloc_SFX(elems);
    ocannl_mm_ws_cap_SFX = ocannl_mm_ws_SFX ? elems : 0;
  }
  return ocannl_mm_ws_SFX;
}

/* Rows i0..i0+mc of A, K p0..p0+kc, into ap in micro-panels of OCK_MR rows, each row
   OCK_KC elements apart (ap[(ip + r) * OCK_KC + k]: the micro-kernel's A reads are at
   constant offsets from one pointer), rows past mc zero. */
static void ocannl_mm_pack_a_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* restrict a,
                                 OCK_T* restrict ap, int64_t i0, int64_t mc, int64_t p0,
                                 int64_t kc) {
  const int64_t rows = (mc + OCK_MR - 1) / OCK_MR * OCK_MR;
  for (int64_t i = 0; i < rows; ++i) {
    OCK_T* restrict dst = ap + i * OCK_KC;
    if (i >= mc) {
      for (int64_t k = 0; k < kc; ++k) dst[k] = 0;
    } else if (s->a2) {
      const OCK_T* row = a + s->am[i0 + i];
      const OCK_T* row2 = s->a2 + s->a2m[i0 + i];
      for (int64_t k = 0; k < kc; ++k) dst[k] = row[s->ak[p0 + k]] * row2[s->a2k[p0 + k]];
    } else if (s->ak_unit) {
      memcpy(dst, a + s->am[i0 + i] + s->ak[p0], sizeof(OCK_T) * (size_t)kc);
    } else {
      const OCK_T* row = a + s->am[i0 + i];
      for (int64_t k = 0; k < kc; ++k) dst[k] = row[s->ak[p0 + k]];
    }
  }
}

/* dst[0..NR) = src[0..NR) by two vector moves (memcpy of 64 bytes became four 16-byte
   moves under -mtune=znver*). */
__attribute__((always_inline))
static inline void ocannl_mm_copy_nr_SFX(OCK_T* restrict dst, const OCK_T* restrict src) {
  ocannl_mm_v_SFX v0, v1;
  memcpy(&v0, src, sizeof v0);
  memcpy(&v1, src + OCK_VL_SFX, sizeof v1);
  memcpy(dst, &v0, sizeof v0);
  memcpy(dst + OCK_VL_SFX, &v1, sizeof v1);
}

/* Rows p0..p0+kc of B, columns j0..j0+nr, into dst (row stride ld, zero-padded to ld). */
static void ocannl_mm_pack_b_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* restrict b,
                                 OCK_T* restrict dst, int64_t j0, int64_t nr, int64_t p0,
                                 int64_t kc, int64_t ld) {
  for (int64_t k = 0; k < kc; ++k) {
    const OCK_T* row = b + s->bk[p0 + k];
    OCK_T* d = dst + k * ld;
    if (s->b2) {
      const OCK_T* row2 = s->b2 + s->b2k[p0 + k];
      for (int64_t q = 0; q < nr; ++q) d[q] = row[s->bn[j0 + q]] * row2[s->b2n[j0 + q]];
    } else if (s->bn_unit && nr == OCK_NR_SFX) {
      ocannl_mm_copy_nr_SFX(d, row + s->bn[j0]);
    } else if (s->bn_unit) {
      memcpy(d, row + s->bn[j0], sizeof(OCK_T) * (size_t)nr);
    } else {
      for (int64_t q = 0; q < nr; ++q) d[q] = row[s->bn[j0 + q]];
    }
    for (int64_t q = nr; q < ld; ++q) d[q] = 0;
  }
}

/* Rows p0..p0+kc of B, columns j0..j0+nc, into micro-panels of OCK_NR_SFX columns
   (bp[jp * kc + k * NR + q]), the last one zero-padded. Row by row: contiguous B rows are
   read in order (the column-panel order walked kc rows per 64 bytes). */
static void ocannl_mm_pack_bp_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* restrict b,
                                  OCK_T* restrict bp, int64_t j0, int64_t nc, int64_t p0,
                                  int64_t kc) {
  if (s->b2 || !s->bn_unit) {
    for (int64_t jp = 0; jp < nc; jp += OCK_NR_SFX) {
      const int64_t nr = nc - jp < OCK_NR_SFX ? nc - jp : OCK_NR_SFX;
      ocannl_mm_pack_b_SFX(s, b, bp + jp * kc, j0 + jp, nr, p0, kc, OCK_NR_SFX);
    }
    return;
  }
  const int64_t whole = nc / OCK_NR_SFX * OCK_NR_SFX;
  for (int64_t k = 0; k < kc; ++k) {
    const OCK_T* restrict row = b + s->bk[p0 + k] + s->bn[j0];
    OCK_T* restrict d = bp + k * OCK_NR_SFX;
    for (int64_t jp = 0; jp < whole; jp += OCK_NR_SFX)
      ocannl_mm_copy_nr_SFX(d + jp * kc, row + jp);
    if (whole < nc) {
      OCK_T* restrict e = d + whole * kc;
      for (int64_t q = 0; q < OCK_NR_SFX; ++q) e[q] = whole + q < nc ? row[whole + q] : 0;
    }
  }
}

/* The mr x nr corner of the tile ct (rows of OCK_NR_SFX) stored or added to C. */
static void ocannl_mm_store_SFX(const ocannl_mm_shape_SFX* s, OCK_T* restrict c,
                                const OCK_T* restrict ct, int64_t i0, int64_t mr, int64_t j0,
                                int64_t nr, int add) {
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

/* One tile: C[i0.., j0..] (= or +=) sum_k ap[MR][k] (x) bp[k][NR], by ocannl_mm_fma in k
   order from 0 (mr x nr of it stored; the packed panels are zero-padded). */
__attribute__((always_inline))
static inline void ocannl_mm_tile_SFX(const ocannl_mm_shape_SFX* s, int64_t kc,
                                      const OCK_T* restrict ap, const OCK_T* restrict bp,
                                      OCK_T* restrict c, int64_t i0, int64_t mr, int64_t j0,
                                      int64_t nr, int add) {
  const int full = mr == OCK_MR && nr == OCK_NR_SFX && s->cn_unit;
  OCK_T* crow[OCK_MR];
  if (full) {
#pragma GCC unroll 16
    for (int r = 0; r < OCK_MR; ++r) {
      crow[r] = c + s->cm[i0 + r] + s->cn[j0];
      __builtin_prefetch(crow[r], 1, 3);
      __builtin_prefetch(crow[r] + OCK_NR_SFX - 1, 1, 3);
    }
  }
  ocannl_mm_v_SFX acc[OCK_MR][2];
#pragma GCC unroll 16
  for (int r = 0; r < OCK_MR; ++r) { acc[r][0] = (ocannl_mm_v_SFX){0}; acc[r][1] = (ocannl_mm_v_SFX){0}; }
#pragma GCC unroll 2
  for (int64_t k = 0; k < kc; ++k) {
    ocannl_mm_v_SFX b0, b1;
    memcpy(&b0, bp + k * OCK_NR_SFX, sizeof b0);
    memcpy(&b1, bp + k * OCK_NR_SFX + OCK_VL_SFX, sizeof b1);
#pragma GCC unroll 16
    for (int r = 0; r < OCK_MR; ++r) {
      OCK_T x = ap[r * OCK_KC + k];
      acc[r][0] = ocannl_mm_fma_SFX(acc[r][0], x, b0);
      acc[r][1] = ocannl_mm_fma_SFX(acc[r][1], x, b1);
    }
  }
  if (full) {
#pragma GCC unroll 16
    for (int r = 0; r < OCK_MR; ++r) {
#pragma GCC unroll 2
      for (int v = 0; v < 2; ++v) {
        ocannl_mm_v_SFX t = acc[r][v];
        if (add) {
          memcpy(&t, crow[r] + v * OCK_VL_SFX, sizeof t);
          t += acc[r][v];
        }
        memcpy(crow[r] + v * OCK_VL_SFX, &t, sizeof t);
      }
    }
    return;
  }
  OCK_T ct[OCK_MR * OCK_NR_SFX] __attribute__((aligned(64)));
#pragma GCC unroll 16
  for (int r = 0; r < OCK_MR; ++r) {
    memcpy(ct + r * OCK_NR_SFX, &acc[r][0], sizeof acc[r][0]);
    memcpy(ct + r * OCK_NR_SFX + OCK_VL_SFX, &acc[r][1], sizeof acc[r][1]);
  }
  ocannl_mm_store_SFX(s, c, ct, i0, mr, j0, nr, add);
}

/* Rows [m0, m1) x columns [n0, n1) of the blocked GEMM, packing into this thread's
   workspace (threads run it on disjoint ranges); nonzero when out of memory. */
static int ocannl_mm_block_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                               OCK_T* c, int accumulate, int64_t m0, int64_t m1, int64_t n0,
                               int64_t n1) {
  const int64_t ncb = n1 - n0 < OCK_NC_SFX ? n1 - n0 : OCK_NC_SFX;
  const int64_t mcb = m1 - m0 < OCK_MC ? m1 - m0 : OCK_MC;
  const int64_t kcb = s->k < OCK_KC ? s->k : OCK_KC;
  const int64_t line = 64 / (int64_t)sizeof(OCK_T); /* elements per 64 bytes */
  const int64_t nb = ((ncb + OCK_NR_SFX) * kcb + line - 1) / line * line;
  OCK_T* bpk = ocannl_mm_workspace_SFX(nb + (mcb + OCK_MR) * OCK_KC);
  if (!bpk) return 1;
  OCK_T* apk = bpk + nb; /* 64-byte aligned too */
  for (int64_t j0 = n0; j0 < n1; j0 += ncb) {
    const int64_t nc = n1 - j0 < ncb ? n1 - j0 : ncb;
    for (int64_t p0 = 0; p0 < s->k; p0 += kcb) {
      const int64_t kc = s->k - p0 < kcb ? s->k - p0 : kcb;
      const int add = accumulate || p0 > 0;
      ocannl_mm_pack_bp_SFX(s, b, bpk, j0, nc, p0, kc);
      for (int64_t i0 = m0; i0 < m1; i0 += mcb) {
        const int64_t mc = m1 - i0 < mcb ? m1 - i0 : mcb;
        ocannl_mm_pack_a_SFX(s, a, apk, i0, mc, p0, kc);
        for (int64_t jp = 0; jp < nc; jp += OCK_NR_SFX) {
          const int64_t nr = nc - jp < OCK_NR_SFX ? nc - jp : OCK_NR_SFX;
          for (int64_t ip = 0; ip < mc; ip += OCK_MR) {
            const int64_t mr = mc - ip < OCK_MR ? mc - ip : OCK_MR;
            ocannl_mm_tile_SFX(s, kc, apk + ip * OCK_KC, bpk + jp * kc, c, i0 + ip, mr, j0 + jp,
                               nr, add);
          }
        }
      }
    }
  }
  return 0;
}
"""
