/* ocannl_ast routine routine (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int routine_f0(float* restrict concat, float* restrict a, float* restrict b) {
  for (int64_t i0 = 0; i0 < 2; ++i0) {
    concat[i0] = a[i0];
  }
  for (int64_t i1 = 0; i1 < 3; ++i1) {
    concat[i1 + 2] = b[i1];
  }
  return 0;
}

int routine(float* const* bufs, const int64_t* statics) {
  routine_f0(bufs[0], bufs[1], bufs[2]);
  return 0;
}
