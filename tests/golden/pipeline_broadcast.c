/* ocannl_ast broadcast broadcast (float32) */
#include <math.h>
#include <stdint.h>

int broadcast(float* restrict mul, float* restrict m) {
  /* constant: s = 2 */
  for (int64_t i0 = 0; i0 < 2; ++i0) {
    for (int64_t i1 = 0; i1 < 3; ++i1) {
      mul[3*i0 + i1] = 2.0f * m[3*i0 + i1];
    }
  }
  return 0;
}
