/* ocannl_ast reduction reduction (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int reduction_f0(float* restrict einsum, float* restrict m) {
  for (int64_t i0 = 0; i0 < 2; ++i0) {
    float l_acc1 = 0.0f;
    for (int64_t i1 = 0; i1 < 3; ++i1) {
      l_acc1 = l_acc1 + m[3*i0 + i1];
    }
    einsum[i0] = l_acc1;
  }
  return 0;
}

int reduction(float* const* bufs, const int64_t* statics) {
  reduction_f0(bufs[0], bufs[1]);
  return 0;
}
