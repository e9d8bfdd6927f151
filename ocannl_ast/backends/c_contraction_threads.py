"""C text of the contraction kernel's threading layer (`c_contraction_kernel` inserts it
where ``@THREADS@`` stands): the GEMM split over threads and the batched GEMM over its cells.

Stage: backend. Three ways to run a call, by its `nthreads` argument: 1, one thread; more
than 1, an OpenMP parallel loop of its own (a fork and a join per call); less than 0, the
call is made by every thread of the enclosing OpenMP team of ``-nthreads`` threads (the
routine's one parallel region, `c_backend`), which share it out with one orphaned
worksharing loop (``omp for``, a barrier at its end) and no fork. Either way M (or N) is cut
into ranges of whole tiles, or the batch into whole cells, one per thread, and each C
element is summed by one thread in the same order as by one thread alone: the results are
the same bits for any thread count. A row range of a problem the small path takes runs
the small path (it sums each element as on all rows). In a team, a thread whose offset
tables could not be allocated (``dry``) still takes part in every worksharing loop, doing
nothing and returning an error, so no other thread waits at a barrier it never reaches.
"""

from __future__ import annotations

THREADS_C = r"""
/* Rows [lo, hi) (split_m) or columns [lo, hi) of the GEMM: the small path on a row range
   (the same sums per element as on all rows), else the blocked path. */
static int ocannl_mm_part_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                              OCK_T* c, int accumulate, int small, int split_m, int64_t lo,
                              int64_t hi) {
  if (s->dry) return 1;
  if (small) {
    ocannl_mm_shape_SFX sr = *s;
    sr.m = hi - lo, sr.am = s->am + lo, sr.cm = s->cm + lo;
    if (sr.a2) sr.a2m = s->a2m + lo; /* a third factor on A: its rows too */
    return ocannl_mm_small_SFX(&sr, a, b, c, accumulate);
  }
  return split_m ? ocannl_mm_block_SFX(s, a, b, c, accumulate, lo, hi, 0, s->n)
                 : ocannl_mm_block_SFX(s, a, b, c, accumulate, 0, s->m, lo, hi);
}

/* The GEMM: with threads, M (or N, when it has more tiles and the small path does not
   apply) is split into one contiguous range of whole tiles per thread, each computed
   independently (no barrier). nthreads < 0: every thread of the enclosing OpenMP team of
   -nthreads calls it (one worksharing loop; this thread's error code). */
static int ocannl_mm_gemm_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                              OCK_T* c, int accumulate, int nthreads) {
  const int team = nthreads < 0, small = ocannl_mm_is_small_SFX(s);
  const int64_t mt = (s->m + OCK_MR - 1) / OCK_MR, nt = (s->n + OCK_NR_SFX - 1) / OCK_NR_SFX;
  const int split_m = small || mt >= nt, nth = team ? -nthreads : nthreads;
  const int64_t tiles = split_m ? mt : nt, step = split_m ? OCK_MR : OCK_NR_SFX;
  const int64_t total = split_m ? s->m : s->n;
  const int parts = nth < tiles ? nth : (int)tiles;
  int err = 0;
  if (!team && parts <= 1 && small) return ocannl_mm_small_SFX(s, a, b, c, accumulate);
  if (team) {
#pragma omp for schedule(static)
    for (int t = 0; t < parts; ++t) {
      const int64_t lo = tiles * t / parts * step, hi0 = tiles * (t + 1) / parts * step;
      err |= ocannl_mm_part_SFX(s, a, b, c, accumulate, small, split_m, lo,
                                hi0 < total ? hi0 : total);
    }
    return err;
  }
#pragma omp parallel for num_threads(parts) schedule(static) reduction(| : err) if (parts > 1)
  for (int t = 0; t < parts; ++t) {
    const int64_t lo = tiles * t / parts * step, hi0 = tiles * (t + 1) / parts * step;
    err |= ocannl_mm_part_SFX(s, a, b, c, accumulate, small, split_m, lo,
                              hi0 < total ? hi0 : total);
  }
  return err;
}

/* One cell q of the batch group bt: the GEMM on its offsets. */
static int ocannl_mm_cell_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                              OCK_T* c, int accumulate, int nthreads, const int64_t* bt,
                              int64_t q) {
  int64_t o[5] = {0, 0, 0, 0, 0}, rem = q;
  for (int i = (int)bt[0] - 1; i >= 0; --i) {
    const int64_t* e = bt + 1 + 6 * i;
    const int64_t digit = rem % e[0];
    rem /= e[0];
    for (int w = 0; w < 5; ++w) o[w] += digit * e[1 + w];
  }
  ocannl_mm_shape_SFX sq = *s;
  sq.a2 = s->a2 ? s->a2 + o[1] : 0;
  sq.b2 = s->b2 ? s->b2 + o[3] : 0;
  return ocannl_mm_gemm_SFX(&sq, a + o[0], b + o[2], c + o[4], accumulate, nthreads);
}

/* The GEMM once per cell of the batch group bt: nb, then per batch symbol (extent, a, a2, b,
   b2, c strides), the last symbol fastest. With threads, the cells are shared out whole (each
   computed by one thread, in the same order as alone: the bits do not depend on the count);
   nthreads < 0: called by every thread of a team (`ocannl_mm_gemm`). */
static int ocannl_mm_batch_SFX(const ocannl_mm_shape_SFX* s, const OCK_T* a, const OCK_T* b,
                               OCK_T* c, int accumulate, int nthreads, const int64_t* bt) {
  const int nb = (int)bt[0], nth = nthreads < 0 ? -nthreads : nthreads;
  int64_t count = 1;
  for (int i = 0; i < nb; ++i) count *= bt[1 + 6 * i];
  const int par = nth > 1 && count >= nth;
  int err = 0;
  if (nthreads < 0) {
    if (!par) {
      for (int64_t q = 0; q < count; ++q) err |= ocannl_mm_cell_SFX(s, a, b, c, accumulate, nthreads, bt, q);
      return err;
    }
#pragma omp for schedule(static)
    for (int64_t q = 0; q < count; ++q)
      err |= s->dry ? 1 : ocannl_mm_cell_SFX(s, a, b, c, accumulate, 1, bt, q);
    return err;
  }
#pragma omp parallel for num_threads(nthreads) schedule(static) reduction(| : err) if (par)
  for (int64_t q = 0; q < count; ++q)
    err |= ocannl_mm_cell_SFX(s, a, b, c, accumulate, par ? 1 : nthreads, bt, q);
  return err;
}
"""
