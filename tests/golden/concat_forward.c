/* ocannl_ast routine routine (float32) */
#include <math.h>
#include <stdint.h>

int routine(float* restrict concat, float* restrict a, float* restrict b) {
  for (int64_t i0 = 0; i0 < 2; ++i0) {
    concat[i0] = a[i0];
  }
  for (int64_t i1 = 0; i1 < 3; ++i1) {
    concat[i1 + 2] = b[i1];
  }
  return 0;
}
