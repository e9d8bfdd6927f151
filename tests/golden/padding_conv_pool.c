/* ocannl_ast routine routine (float32) */
#include <math.h>
#include <stdint.h>

static inline float ocannl_select_f(int c, float a, float b) {
  union { float v; uint32_t u; } x = { a }, y = { b };
  uint32_t m = (uint32_t)0 - (uint32_t)(c != 0);
  x.u = (x.u & m) | (y.u & ~m);
  return x.v;
}

static inline float ocannl_max_f(float a, float b) { return ocannl_select_f((a > b) | (a != a), a, b); }

static __attribute__((noinline)) int routine_f0(float* restrict img, float* restrict einsum, float* restrict kern) {
  /* constant: window = -0 */
  /* unrolled: 1 small reduction */
  /* padding: reset the margins (1+1 1+1 0+0) of img [6, 6, 2] to 0 */
  for (int64_t i0 = 0; i0 < 12; ++i0) {
    img[i0] = 0.0f;
  }
  for (int64_t i1 = 0; i1 < 12; ++i1) {
    img[i1 + 60] = 0.0f;
  }
  for (int64_t i2 = 0; i2 < 6; ++i2) {
    for (int64_t i3 = 0; i3 < 2; ++i3) {
      img[12*i2 + i3] = 0.0f;
    }
  }
  for (int64_t i4 = 0; i4 < 6; ++i4) {
    for (int64_t i5 = 0; i5 < 2; ++i5) {
      img[12*i4 + i5 + 10] = 0.0f;
    }
  }
  for (int64_t i6 = 0; i6 < 2; ++i6) {
    for (int64_t i7 = 0; i7 < 2; ++i7) {
      float l_acc1 = 0.0f;
      for (int64_t i8 = 0; i8 < 2; ++i8) {
        for (int64_t i9 = 0; i9 < 3; ++i9) {
          #pragma GCC unroll 3
          for (int64_t i10 = 0; i10 < 3; ++i10) {
            l_acc1 = l_acc1 + (img[24*i6 + 12*i9 + 4*i7 + 2*i10 + i8] * kern[6*i9 + 2*i10 + i8]);
          }
        }
      }
      einsum[2*i6 + i7] = l_acc1;
    }
  }
  /* padding: reset the margins (1+1 1+1 0+0) of img [6, 6, 2] to -inf */
  for (int64_t i11 = 0; i11 < 12; ++i11) {
    img[i11] = -INFINITY;
  }
  for (int64_t i12 = 0; i12 < 12; ++i12) {
    img[i12 + 60] = -INFINITY;
  }
  for (int64_t i13 = 0; i13 < 6; ++i13) {
    for (int64_t i14 = 0; i14 < 2; ++i14) {
      img[12*i13 + i14] = -INFINITY;
    }
  }
  return 0;
}

static __attribute__((noinline)) int routine_f1(float* restrict img, float* restrict einsum, float* restrict einsum_max, float* restrict einsum_1) {
  for (int64_t i15 = 0; i15 < 6; ++i15) {
    for (int64_t i16 = 0; i16 < 2; ++i16) {
      img[12*i15 + i16 + 10] = -INFINITY;
    }
  }
  for (int64_t i17 = 0; i17 < 4; ++i17) {
    for (int64_t i18 = 0; i18 < 8; ++i18) {
      einsum_max[8*i17 + i18] = ocannl_max_f(ocannl_max_f(ocannl_max_f(ocannl_max_f(ocannl_max_f(ocannl_max_f(ocannl_max_f(ocannl_max_f(ocannl_max_f((-INFINITY), img[12*i17 + i18]), img[12*i17 + i18 + 2]), img[12*i17 + i18 + 4]), img[12*i17 + i18 + 12]), img[12*i17 + i18 + 14]), img[12*i17 + i18 + 16]), img[12*i17 + i18 + 24]), img[12*i17 + i18 + 26]), img[12*i17 + i18 + 28]);
    }
  }
  for (int64_t i19 = 0; i19 < 4; ++i19) {
    for (int64_t i20 = 0; i20 < 32; ++i20) {
      einsum_1[32*i19 + i20] = einsum[i19] * einsum_max[i20];
    }
  }
  return 0;
}

int routine(float* const* bufs, const int64_t* statics) {
  routine_f0(bufs[0], bufs[1], bufs[2]);
  routine_f1(bufs[0], bufs[1], bufs[3], bufs[4]);
  return 0;
}
