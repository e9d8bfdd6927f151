/* ocannl_ast routine row_sum (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int row_sum_f0(float* restrict r, float* restrict x) {
  for (int64_t ocannl_k = 0; ocannl_k < 4; ++ocannl_k) r[ocannl_k] = 0.0f;
  for (int64_t i0 = 0; i0 < 4; ++i0) {
    for (int64_t i1 = 0; i1 < 6; ++i1) {
      r[i0] = r[i0] + x[6*i0 + i1];
    }
  }
  return 0;
}

int row_sum(float* const* bufs, const int64_t* statics) {
  row_sum_f0(bufs[0], bufs[1]);
  return 0;
}
