/* ocannl_ast broadcast broadcast (float32) */
#include <math.h>
#include <stdint.h>

static __attribute__((noinline)) int broadcast_f0(float* restrict mul, float* restrict m) {
  /* constant: s = 2 */
  for (int64_t i0 = 0; i0 < 2; ++i0) {
    for (int64_t i1 = 0; i1 < 3; ++i1) {
      mul[3*i0 + i1] = 2.0f * m[3*i0 + i1];
    }
  }
  return 0;
}

int broadcast(float* const* bufs, const int64_t* statics) {
  broadcast_f0(bufs[0], bufs[1]);
  return 0;
}
