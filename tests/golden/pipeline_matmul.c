/* ocannl_ast matmul matmul (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int matmul_f0(float* restrict einsum, float* restrict a, float* restrict b) {
  for (int64_t i0 = 0; i0 < 2; ++i0) {
    for (int64_t i1 = 0; i1 < 4; ++i1) {
      float l_acc1 = 0.0f;
      #pragma GCC unroll 3
      for (int64_t i2 = 0; i2 < 3; ++i2) {
        l_acc1 = l_acc1 + (a[3*i0 + i2] * b[4*i2 + i1]);
      }
      einsum[4*i0 + i1] = l_acc1;
    }
  }
  return 0;
}

int matmul(float* const* bufs, const int64_t* statics) {
  matmul_f0(bufs[0], bufs[1], bufs[2]);
  return 0;
}
