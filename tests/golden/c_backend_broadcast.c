/* ocannl_ast routine bcast (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int bcast_f0(float* restrict y, float* restrict x, float* restrict s) {
  for (int64_t i0 = 0; i0 < 15; ++i0) {
    y[i0] = x[i0] + (s[0] + 0.5f);
  }
  return 0;
}

int bcast(float* const* bufs, const int64_t* statics) {
  bcast_f0(bufs[0], bufs[1], bufs[2]);
  return 0;
}
