/* ocannl_ast routine bcast (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int bcast_f0(float* restrict y, float* restrict x, float* restrict s) {
  for (int64_t i0 = 0; i0 < 3; ++i0) {
    for (int64_t i1 = 0; i1 < 5; ++i1) {
      y[5*i0 + i1] = x[5*i0 + i1] + (s[0] + 0.5f);
    }
  }
  return 0;
}

int bcast(float* const* bufs, const int64_t* statics) {
  bcast_f0(bufs[0], bufs[1], bufs[2]);
  return 0;
}
