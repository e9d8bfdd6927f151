/* ocannl_ast reduction reduction (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int reduction_f0(float* restrict einsum, float* restrict m) {
  /* unrolled: 1 small reduction */
  for (int64_t i0 = 0; i0 < 2; ++i0) {
    einsum[i0] = ((0.0f + m[3*i0]) + m[3*i0 + 1]) + m[3*i0 + 2];
  }
  return 0;
}

int reduction(float* const* bufs, const int64_t* statics) {
  reduction_f0(bufs[0], bufs[1]);
  return 0;
}
