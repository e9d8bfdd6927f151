/* ocannl_ast routine routine (float32) */
#include <math.h>
#include <stdint.h>

int routine(float* restrict a_grad, float* restrict b_b_grad, float* restrict einsum_grad, float* restrict concat_grad, float* restrict ndarray) {
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
