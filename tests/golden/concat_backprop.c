/* ocannl_ast routine routine (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int routine_f0(float* restrict a_grad, float* restrict b_b_grad, float* restrict einsum_grad, float* restrict concat_grad, float* restrict ndarray) {
  for (int64_t ocannl_k = 0; ocannl_k < 2; ++ocannl_k) a_grad[ocannl_k] = 0.0f;
  for (int64_t ocannl_k = 0; ocannl_k < 3; ++ocannl_k) b_b_grad[ocannl_k] = 0.0f;
  einsum_grad[0] = 1.0f;
  for (int64_t i0 = 0; i0 < 5; ++i0) {
    concat_grad[i0] = einsum_grad[0] * ndarray[i0];
  }
  for (int64_t i1 = 0; i1 < 2; ++i1) {
    a_grad[i1] = a_grad[i1] + concat_grad[i1];
  }
  for (int64_t i2 = 0; i2 < 3; ++i2) {
    b_b_grad[i2] = b_b_grad[i2] + concat_grad[i2 + 2];
  }
  return 0;
}

int routine(float* const* bufs, const int64_t* statics) {
  routine_f0(bufs[0], bufs[1], bufs[2], bufs[3], bufs[4]);
  return 0;
}
