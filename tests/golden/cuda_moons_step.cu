/* ocannl_ast routine moons_step (float32), CUDA */
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)

static __device__ __forceinline__ __attribute__((unused)) float ocannl_select_f(int c, float a, float b) {
  union { float v; uint32_t u; } x = { a }, y = { b };
  uint32_t m = (uint32_t)0 - (uint32_t)(c != 0);
  x.u = (x.u & m) | (y.u & ~m);
  return x.v;
}

static __device__ __forceinline__ __attribute__((unused)) float ocannl_max_f(float a, float b) { return ocannl_select_f((a > b) | (a != a), a, b); }

/* kernel 0: 256 threads */
/* constant: t_1 = 1 */
/* constant: t_0_0625 = 0.0625 */
/* virtual: relu_1 (inlined into 2 reads) */
/* virtual: add_2 (inlined into 1 read) */
/* virtual: mul (inlined into 1 read) */
/* virtual: relu_2 (inlined into 1 read) */
/* virtual: relu_grad (inlined into 1 read) */
/* virtual: sub_grad (inlined into 1 read) */
/* virtual: compose_grad (inlined into 2 reads) */
/* virtual: relu_grad_1 (inlined into 1 read) */
/* virtual: compose_grad_1 (inlined into 2 reads) */
/* virtual: compose_grad_2 (inlined into 1 read) */
/* virtual: compose (its reader fused into the reduction) */
/* virtual: compose_1 (its reader fused into the reduction) */
/* virtual: compose_2 (its reader fused into the reduction) */
/* virtual: einsum (its reader fused into the reduction) */
/* virtual: relu_grad_2 (its reader fused into the reduction) */
/* fused: 12 pointwise nests into the one before */
extern "C" __global__ void moons_step_k0(float* __restrict__ w, float* __restrict__ moons_x, float* __restrict__ add, float* __restrict__ b, const long long* __restrict__ ocannl_statics, int* ocannl_err) {
  const long long s_batch = ocannl_statics[0];
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i0 = ocannl_t / 16;
    const long long i1 = ocannl_t % 16;
    float l_acc1 = 0.0f;
    for (long long i2 = 0; i2 < 2; ++i2) {
      l_acc1 = l_acc1 + (w[2*i1 + i2] * moons_x[32*s_batch + 2*i0 + i2]);
    }
    add[16*i0 + i1] = l_acc1 + b[i1];
  }
}

/* kernel 1: 256 threads */
extern "C" __global__ void moons_step_k1(float* __restrict__ add, float* __restrict__ relu, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i3 = ocannl_t / 16;
    const long long i4 = ocannl_t % 16;
    relu[16*i3 + i4] = ocannl_max_f(add[16*i3 + i4], 0.0f);
  }
}

/* kernel 2: 256 threads */
extern "C" __global__ void moons_step_k2(float* __restrict__ relu, float* __restrict__ w_1, float* __restrict__ add_1, float* __restrict__ b_b_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i5 = ocannl_t / 16;
    const long long i6 = ocannl_t % 16;
    float l_acc2 = 0.0f;
    for (long long i7 = 0; i7 < 16; ++i7) {
      l_acc2 = l_acc2 + (w_1[16*i6 + i7] * relu[16*i5 + i7]);
    }
    add_1[16*i5 + i6] = l_acc2 + b_b_1[i6];
  }
}

/* kernel 3: 16 threads */
extern "C" __global__ void moons_step_k3(float* __restrict__ add_1, float* __restrict__ w_2, float* __restrict__ b_b_2, float* __restrict__ moons_y, float* __restrict__ sub, const long long* __restrict__ ocannl_statics, int* ocannl_err) {
  const long long s_batch = ocannl_statics[0];
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i8 = ocannl_t;
    float l_acc3 = 0.0f;
    for (long long i9 = 0; i9 < 16; ++i9) {
      l_acc3 = l_acc3 + (w_2[i9] * ocannl_max_f(add_1[16*i8 + i9], 0.0f));
    }
    sub[i8] = 1.0f - (moons_y[16*s_batch + i8] * (l_acc3 + b_b_2[0]));
  }
}

/* kernel 4: 1 thread */
extern "C" __global__ void moons_step_k4(float* __restrict__ sub, float* __restrict__ mul_1, int* ocannl_err) {
  {
    float l_acc4 = 0.0f;
    for (long long i10 = 0; i10 < 16; ++i10) {
      l_acc4 = l_acc4 + ocannl_max_f(sub[i10], 0.0f);
    }
    mul_1[0] = l_acc4 * 0.0625f;
  }
}

/* kernel 5: 16 threads */
extern "C" __global__ void moons_step_k5(float* __restrict__ mul_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    mul_grad[ocannl_t] = 0.0f;
  }
}

/* kernel 6: 1 thread */
extern "C" __global__ void moons_step_k6(float* __restrict__ mul_grad_1, float* __restrict__ einsum_grad, int* ocannl_err) {
  mul_grad_1[0] = 1.0f;
  einsum_grad[0] = mul_grad_1[0] * 0.0625f;
}

/* kernel 7: 16 threads */
extern "C" __global__ void moons_step_k7(float* __restrict__ moons_y, float* __restrict__ sub, float* __restrict__ mul_grad, float* __restrict__ einsum_grad, float* __restrict__ add_grad, const long long* __restrict__ ocannl_statics, int* ocannl_err) {
  const long long s_batch = ocannl_statics[0];
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i11 = ocannl_t;
    mul_grad[i11] = mul_grad[i11] - ocannl_select_f(sub[i11] > 0.0f, einsum_grad[0], 0.0f);
    add_grad[i11] = moons_y[16*s_batch + i11] * mul_grad[i11];
  }
}

/* kernel 8: 1 thread */
extern "C" __global__ void moons_step_k8(float* __restrict__ add_grad, float* __restrict__ b_b_grad, int* ocannl_err) {
  {
    float l_acc5 = 0.0f;
    for (long long i12 = 0; i12 < 16; ++i12) {
      l_acc5 = l_acc5 + add_grad[i12];
    }
    b_b_grad[0] = l_acc5;
  }
}

/* kernel 9: 16 threads */
extern "C" __global__ void moons_step_k9(float* __restrict__ add_1, float* __restrict__ add_grad, float* __restrict__ w_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i9 = ocannl_t;
    float l_acc6 = 0.0f;
    for (long long i8 = 0; i8 < 16; ++i8) {
      l_acc6 = l_acc6 + (add_grad[i8] * ocannl_max_f(add_1[16*i8 + i9], 0.0f));
    }
    w_grad[i9] = l_acc6;
  }
}

/* kernel 10: 256 threads */
extern "C" __global__ void moons_step_k10(float* __restrict__ add_1, float* __restrict__ w_2, float* __restrict__ add_grad, float* __restrict__ add_grad_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i13 = ocannl_t / 16;
    const long long i14 = ocannl_t % 16;
    add_grad_1[16*i13 + i14] = ocannl_select_f(add_1[16*i13 + i14] > 0.0f, (w_2[i14] * add_grad[i13]), 0.0f);
  }
}

/* kernel 11: 16 threads */
extern "C" __global__ void moons_step_k11(float* __restrict__ add_grad_1, float* __restrict__ b_b_grad_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i15 = ocannl_t;
    float l_acc7 = 0.0f;
    for (long long i16 = 0; i16 < 16; ++i16) {
      l_acc7 = l_acc7 + add_grad_1[16*i16 + i15];
    }
    b_b_grad_1[i15] = l_acc7;
  }
}

/* kernel 12: 256 threads */
extern "C" __global__ void moons_step_k12(float* __restrict__ relu, float* __restrict__ add_grad_1, float* __restrict__ w_grad_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i6 = ocannl_t / 16;
    const long long i7 = ocannl_t % 16;
    float l_acc8 = 0.0f;
    for (long long i5 = 0; i5 < 16; ++i5) {
      l_acc8 = l_acc8 + (add_grad_1[16*i5 + i6] * relu[16*i5 + i7]);
    }
    w_grad_1[16*i6 + i7] = l_acc8;
  }
}

/* kernel 13: 256 threads */
extern "C" __global__ void moons_step_k13(float* __restrict__ add, float* __restrict__ w_1, float* __restrict__ add_grad_1, float* __restrict__ add_grad_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i5 = ocannl_t / 16;
    const long long i7 = ocannl_t % 16;
    float l_acc9 = 0.0f;
    for (long long i6 = 0; i6 < 16; ++i6) {
      l_acc9 = l_acc9 + (w_1[16*i6 + i7] * add_grad_1[16*i5 + i6]);
    }
    add_grad_2[16*i5 + i7] = ocannl_select_f(add[16*i5 + i7] > 0.0f, l_acc9, 0.0f);
  }
}

/* kernel 14: 16 threads */
extern "C" __global__ void moons_step_k14(float* __restrict__ add_grad_2, float* __restrict__ b_b_grad_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i17 = ocannl_t;
    float l_acc10 = 0.0f;
    for (long long i18 = 0; i18 < 16; ++i18) {
      l_acc10 = l_acc10 + add_grad_2[16*i18 + i17];
    }
    b_b_grad_2[i17] = l_acc10;
  }
}

/* kernel 15: 32 threads */
extern "C" __global__ void moons_step_k15(float* __restrict__ moons_x, float* __restrict__ add_grad_2, float* __restrict__ w_grad_2, const long long* __restrict__ ocannl_statics, int* ocannl_err) {
  const long long s_batch = ocannl_statics[0];
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i1 = ocannl_t / 2;
    const long long i2 = ocannl_t % 2;
    float l_acc11 = 0.0f;
    for (long long i0 = 0; i0 < 16; ++i0) {
      l_acc11 = l_acc11 + (add_grad_2[16*i0 + i1] * moons_x[32*s_batch + 2*i0 + i2]);
    }
    w_grad_2[2*i1 + i2] = l_acc11;
  }
}

/* kernel 16: 1 thread */
extern "C" __global__ void moons_step_k16(float* __restrict__ learning_rate, const long long* __restrict__ ocannl_statics, int* ocannl_err) {
  const long long s_step = ocannl_statics[1];
  learning_rate[0] = 0.10000000149011612f * (1.0f - ((0.8999999761581421f * ((float)s_step)) / 100.0f));
}

/* kernel 17: 32 threads */
extern "C" __global__ void moons_step_k17(float* __restrict__ w, float* __restrict__ w_grad_2, float* __restrict__ learning_rate, float* __restrict__ sgd_momentum, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i19 = ocannl_t / 2;
    const long long i20 = ocannl_t % 2;
    sgd_momentum[2*i19 + i20] = 0.8999999761581421f * sgd_momentum[2*i19 + i20];
    sgd_momentum[2*i19 + i20] = sgd_momentum[2*i19 + i20] + w_grad_2[2*i19 + i20];
    w[2*i19 + i20] = w[2*i19 + i20] - (learning_rate[0] * sgd_momentum[2*i19 + i20]);
  }
}

/* kernel 18: 16 threads */
extern "C" __global__ void moons_step_k18(float* __restrict__ b, float* __restrict__ b_b_grad_2, float* __restrict__ learning_rate, float* __restrict__ sgd_momentum_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i21 = ocannl_t;
    sgd_momentum_1[i21] = 0.8999999761581421f * sgd_momentum_1[i21];
    sgd_momentum_1[i21] = sgd_momentum_1[i21] + b_b_grad_2[i21];
    b[i21] = b[i21] - (learning_rate[0] * sgd_momentum_1[i21]);
  }
}

/* kernel 19: 256 threads */
extern "C" __global__ void moons_step_k19(float* __restrict__ w_1, float* __restrict__ w_grad_1, float* __restrict__ learning_rate, float* __restrict__ sgd_momentum_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i22 = ocannl_t / 16;
    const long long i23 = ocannl_t % 16;
    sgd_momentum_2[16*i22 + i23] = 0.8999999761581421f * sgd_momentum_2[16*i22 + i23];
    sgd_momentum_2[16*i22 + i23] = sgd_momentum_2[16*i22 + i23] + w_grad_1[16*i22 + i23];
    w_1[16*i22 + i23] = w_1[16*i22 + i23] - (learning_rate[0] * sgd_momentum_2[16*i22 + i23]);
  }
}

/* kernel 20: 16 threads */
extern "C" __global__ void moons_step_k20(float* __restrict__ b_b_1, float* __restrict__ w_2, float* __restrict__ w_grad, float* __restrict__ b_b_grad_1, float* __restrict__ learning_rate, float* __restrict__ sgd_momentum_3, float* __restrict__ sgd_momentum_4, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i24 = ocannl_t;
    sgd_momentum_3[i24] = 0.8999999761581421f * sgd_momentum_3[i24];
    sgd_momentum_3[i24] = sgd_momentum_3[i24] + b_b_grad_1[i24];
    b_b_1[i24] = b_b_1[i24] - (learning_rate[0] * sgd_momentum_3[i24]);
    sgd_momentum_4[i24] = 0.8999999761581421f * sgd_momentum_4[i24];
    sgd_momentum_4[i24] = sgd_momentum_4[i24] + w_grad[i24];
    w_2[i24] = w_2[i24] - (learning_rate[0] * sgd_momentum_4[i24]);
  }
}

/* kernel 21: 1 thread */
extern "C" __global__ void moons_step_k21(float* __restrict__ b_b_2, float* __restrict__ b_b_grad, float* __restrict__ learning_rate, float* __restrict__ sgd_momentum_5, int* ocannl_err) {
  sgd_momentum_5[0] = 0.8999999761581421f * sgd_momentum_5[0];
  sgd_momentum_5[0] = sgd_momentum_5[0] + b_b_grad[0];
  b_b_2[0] = b_b_2[0] - (learning_rate[0] * sgd_momentum_5[0]);
}
