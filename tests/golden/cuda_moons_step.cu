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

/* kernel 0: 32 threads */
extern "C" __global__ void moons_step_k0(float* __restrict__ batch_slice, float* __restrict__ moons_x, long long s_batch, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i0 = ocannl_t / 2;
    const long long i1 = ocannl_t % 2;
    batch_slice[2*i0 + i1] = moons_x[32*s_batch + 2*i0 + i1];
  }
}

/* kernel 1: 16 threads */
extern "C" __global__ void moons_step_k1(float* __restrict__ batch_slice_1, float* __restrict__ moons_y, long long s_batch, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i2 = ocannl_t;
    batch_slice_1[i2] = moons_y[16*s_batch + i2];
  }
}

/* kernel 2: 256 threads */
extern "C" __global__ void moons_step_k2(float* __restrict__ batch_slice, float* __restrict__ compose, float* __restrict__ w, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i3 = ocannl_t / 16;
    const long long i4 = ocannl_t % 16;
    float l_acc1 = 0.0f;
    for (long long i5 = 0; i5 < 2; ++i5) {
      l_acc1 = l_acc1 + (w[2*i4 + i5] * batch_slice[2*i3 + i5]);
    }
    compose[16*i3 + i4] = l_acc1;
  }
}

/* kernel 3: 256 threads */
extern "C" __global__ void moons_step_k3(float* __restrict__ compose, float* __restrict__ add, float* __restrict__ b, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i6 = ocannl_t / 16;
    const long long i7 = ocannl_t % 16;
    add[16*i6 + i7] = compose[16*i6 + i7] + b[i7];
  }
}

/* kernel 4: 256 threads */
extern "C" __global__ void moons_step_k4(float* __restrict__ add, float* __restrict__ relu, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i8 = ocannl_t / 16;
    const long long i9 = ocannl_t % 16;
    relu[16*i8 + i9] = ocannl_max_f(add[16*i8 + i9], 0.0f);
  }
}

/* kernel 5: 256 threads */
extern "C" __global__ void moons_step_k5(float* __restrict__ relu, float* __restrict__ compose_1, float* __restrict__ w_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i10 = ocannl_t / 16;
    const long long i11 = ocannl_t % 16;
    float l_acc2 = 0.0f;
    for (long long i12 = 0; i12 < 16; ++i12) {
      l_acc2 = l_acc2 + (w_1[16*i11 + i12] * relu[16*i10 + i12]);
    }
    compose_1[16*i10 + i11] = l_acc2;
  }
}

/* kernel 6: 256 threads */
extern "C" __global__ void moons_step_k6(float* __restrict__ compose_1, float* __restrict__ add_1, float* __restrict__ b_b_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i13 = ocannl_t / 16;
    const long long i14 = ocannl_t % 16;
    add_1[16*i13 + i14] = compose_1[16*i13 + i14] + b_b_1[i14];
  }
}

/* kernel 7: 256 threads */
extern "C" __global__ void moons_step_k7(float* __restrict__ add_1, float* __restrict__ relu_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i15 = ocannl_t / 16;
    const long long i16 = ocannl_t % 16;
    relu_1[16*i15 + i16] = ocannl_max_f(add_1[16*i15 + i16], 0.0f);
  }
}

/* kernel 8: 16 threads */
extern "C" __global__ void moons_step_k8(float* __restrict__ relu_1, float* __restrict__ compose_2, float* __restrict__ w_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i17 = ocannl_t;
    float l_acc3 = 0.0f;
    for (long long i18 = 0; i18 < 16; ++i18) {
      l_acc3 = l_acc3 + (w_2[i18] * relu_1[16*i17 + i18]);
    }
    compose_2[i17] = l_acc3;
  }
}

/* kernel 9: 16 threads */
extern "C" __global__ void moons_step_k9(float* __restrict__ compose_2, float* __restrict__ add_2, float* __restrict__ b_b_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i19 = ocannl_t;
    add_2[i19] = compose_2[i19] + b_b_2[0];
  }
}

/* kernel 10: 16 threads */
extern "C" __global__ void moons_step_k10(float* __restrict__ batch_slice_1, float* __restrict__ add_2, float* __restrict__ mul, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i20 = ocannl_t;
    mul[i20] = batch_slice_1[i20] * add_2[i20];
  }
}

/* kernel 11: 16 threads */
extern "C" __global__ void moons_step_k11(float* __restrict__ mul, float* __restrict__ sub, float* __restrict__ t_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i21 = ocannl_t;
    sub[i21] = t_1[0] - mul[i21];
  }
}

/* kernel 12: 16 threads */
extern "C" __global__ void moons_step_k12(float* __restrict__ sub, float* __restrict__ relu_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i22 = ocannl_t;
    relu_2[i22] = ocannl_max_f(sub[i22], 0.0f);
  }
}

/* kernel 13: 1 thread */
extern "C" __global__ void moons_step_k13(float* __restrict__ relu_2, float* __restrict__ einsum, float* __restrict__ mul_1, float* __restrict__ t_0_0625, int* ocannl_err) {
  {
    float l_acc4 = 0.0f;
    for (long long i23 = 0; i23 < 16; ++i23) {
      l_acc4 = l_acc4 + relu_2[i23];
    }
    einsum[0] = l_acc4;
  }
  mul_1[0] = einsum[0] * t_0_0625[0];
}

/* kernel 14: 16 threads */
extern "C" __global__ void moons_step_k14(float* __restrict__ mul_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    mul_grad[ocannl_t] = 0.0f;
  }
}

/* kernel 15: 1 thread */
extern "C" __global__ void moons_step_k15(float* __restrict__ t_0_0625, float* __restrict__ mul_grad_1, float* __restrict__ einsum_grad, int* ocannl_err) {
  mul_grad_1[0] = 1.0f;
  einsum_grad[0] = mul_grad_1[0] * t_0_0625[0];
}

/* kernel 16: 16 threads */
extern "C" __global__ void moons_step_k16(float* __restrict__ einsum_grad, float* __restrict__ relu_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i23 = ocannl_t;
    relu_grad[i23] = einsum_grad[0];
  }
}

/* kernel 17: 16 threads */
extern "C" __global__ void moons_step_k17(float* __restrict__ sub, float* __restrict__ relu_grad, float* __restrict__ sub_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i22 = ocannl_t;
    sub_grad[i22] = ocannl_select_f(sub[i22] > 0.0f, relu_grad[i22], 0.0f);
  }
}

/* kernel 18: 16 threads */
extern "C" __global__ void moons_step_k18(float* __restrict__ mul_grad, float* __restrict__ sub_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i21 = ocannl_t;
    mul_grad[i21] = mul_grad[i21] - sub_grad[i21];
  }
}

/* kernel 19: 16 threads */
extern "C" __global__ void moons_step_k19(float* __restrict__ batch_slice_1, float* __restrict__ mul_grad, float* __restrict__ add_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i20 = ocannl_t;
    add_grad[i20] = batch_slice_1[i20] * mul_grad[i20];
  }
}

/* kernel 20: 16 threads */
extern "C" __global__ void moons_step_k20(float* __restrict__ add_grad, float* __restrict__ compose_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i19 = ocannl_t;
    compose_grad[i19] = add_grad[i19];
  }
}

/* kernel 21: 1 thread */
extern "C" __global__ void moons_step_k21(float* __restrict__ add_grad, float* __restrict__ b_b_grad, int* ocannl_err) {
  {
    float l_acc5 = 0.0f;
    for (long long i19 = 0; i19 < 16; ++i19) {
      l_acc5 = l_acc5 + add_grad[i19];
    }
    b_b_grad[0] = l_acc5;
  }
}

/* kernel 22: 16 threads */
extern "C" __global__ void moons_step_k22(float* __restrict__ relu_1, float* __restrict__ compose_grad, float* __restrict__ w_grad, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i18 = ocannl_t;
    float l_acc6 = 0.0f;
    for (long long i17 = 0; i17 < 16; ++i17) {
      l_acc6 = l_acc6 + (compose_grad[i17] * relu_1[16*i17 + i18]);
    }
    w_grad[i18] = l_acc6;
  }
}

/* kernel 23: 256 threads */
extern "C" __global__ void moons_step_k23(float* __restrict__ w_2, float* __restrict__ compose_grad, float* __restrict__ relu_grad_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i17 = ocannl_t / 16;
    const long long i18 = ocannl_t % 16;
    relu_grad_1[16*i17 + i18] = w_2[i18] * compose_grad[i17];
  }
}

/* kernel 24: 256 threads */
extern "C" __global__ void moons_step_k24(float* __restrict__ add_1, float* __restrict__ relu_grad_1, float* __restrict__ add_grad_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i15 = ocannl_t / 16;
    const long long i16 = ocannl_t % 16;
    add_grad_1[16*i15 + i16] = ocannl_select_f(add_1[16*i15 + i16] > 0.0f, relu_grad_1[16*i15 + i16], 0.0f);
  }
}

/* kernel 25: 256 threads */
extern "C" __global__ void moons_step_k25(float* __restrict__ add_grad_1, float* __restrict__ compose_grad_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i13 = ocannl_t / 16;
    const long long i14 = ocannl_t % 16;
    compose_grad_1[16*i13 + i14] = add_grad_1[16*i13 + i14];
  }
}

/* kernel 26: 16 threads */
extern "C" __global__ void moons_step_k26(float* __restrict__ add_grad_1, float* __restrict__ b_b_grad_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i14 = ocannl_t;
    float l_acc7 = 0.0f;
    for (long long i13 = 0; i13 < 16; ++i13) {
      l_acc7 = l_acc7 + add_grad_1[16*i13 + i14];
    }
    b_b_grad_1[i14] = l_acc7;
  }
}

/* kernel 27: 256 threads */
extern "C" __global__ void moons_step_k27(float* __restrict__ relu, float* __restrict__ compose_grad_1, float* __restrict__ w_grad_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i11 = ocannl_t / 16;
    const long long i12 = ocannl_t % 16;
    float l_acc8 = 0.0f;
    for (long long i10 = 0; i10 < 16; ++i10) {
      l_acc8 = l_acc8 + (compose_grad_1[16*i10 + i11] * relu[16*i10 + i12]);
    }
    w_grad_1[16*i11 + i12] = l_acc8;
  }
}

/* kernel 28: 256 threads */
extern "C" __global__ void moons_step_k28(float* __restrict__ w_1, float* __restrict__ compose_grad_1, float* __restrict__ relu_grad_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i10 = ocannl_t / 16;
    const long long i12 = ocannl_t % 16;
    float l_acc9 = 0.0f;
    for (long long i11 = 0; i11 < 16; ++i11) {
      l_acc9 = l_acc9 + (w_1[16*i11 + i12] * compose_grad_1[16*i10 + i11]);
    }
    relu_grad_2[16*i10 + i12] = l_acc9;
  }
}

/* kernel 29: 256 threads */
extern "C" __global__ void moons_step_k29(float* __restrict__ add, float* __restrict__ relu_grad_2, float* __restrict__ add_grad_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i8 = ocannl_t / 16;
    const long long i9 = ocannl_t % 16;
    add_grad_2[16*i8 + i9] = ocannl_select_f(add[16*i8 + i9] > 0.0f, relu_grad_2[16*i8 + i9], 0.0f);
  }
}

/* kernel 30: 256 threads */
extern "C" __global__ void moons_step_k30(float* __restrict__ add_grad_2, float* __restrict__ compose_grad_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i6 = ocannl_t / 16;
    const long long i7 = ocannl_t % 16;
    compose_grad_2[16*i6 + i7] = add_grad_2[16*i6 + i7];
  }
}

/* kernel 31: 16 threads */
extern "C" __global__ void moons_step_k31(float* __restrict__ add_grad_2, float* __restrict__ b_b_grad_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i7 = ocannl_t;
    float l_acc10 = 0.0f;
    for (long long i6 = 0; i6 < 16; ++i6) {
      l_acc10 = l_acc10 + add_grad_2[16*i6 + i7];
    }
    b_b_grad_2[i7] = l_acc10;
  }
}

/* kernel 32: 32 threads */
extern "C" __global__ void moons_step_k32(float* __restrict__ batch_slice, float* __restrict__ compose_grad_2, float* __restrict__ w_grad_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i4 = ocannl_t / 2;
    const long long i5 = ocannl_t % 2;
    float l_acc11 = 0.0f;
    for (long long i3 = 0; i3 < 16; ++i3) {
      l_acc11 = l_acc11 + (compose_grad_2[16*i3 + i4] * batch_slice[2*i3 + i5]);
    }
    w_grad_2[2*i4 + i5] = l_acc11;
  }
}

/* kernel 33: 1 thread */
extern "C" __global__ void moons_step_k33(float* __restrict__ learning_rate, long long s_step, int* ocannl_err) {
  learning_rate[0] = 0.10000000149011612f * (1.0f - ((0.8999999761581421f * ((float)s_step)) / 100.0f));
}

/* kernel 34: 32 threads */
extern "C" __global__ void moons_step_k34(float* __restrict__ w_grad_2, float* __restrict__ sgd_delta, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i24 = ocannl_t / 2;
    const long long i25 = ocannl_t % 2;
    sgd_delta[2*i24 + i25] = w_grad_2[2*i24 + i25];
  }
}

/* kernel 35: 32 threads */
extern "C" __global__ void moons_step_k35(float* __restrict__ mul_2, float* __restrict__ t_0_9, float* __restrict__ sgd_momentum, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i26 = ocannl_t / 2;
    const long long i27 = ocannl_t % 2;
    mul_2[2*i26 + i27] = t_0_9[0] * sgd_momentum[2*i26 + i27];
  }
}

/* kernel 36: 32 threads */
extern "C" __global__ void moons_step_k36(float* __restrict__ sgd_delta, float* __restrict__ mul_2, float* __restrict__ sgd_momentum, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i28 = ocannl_t / 2;
    const long long i29 = ocannl_t % 2;
    sgd_momentum[2*i28 + i29] = mul_2[2*i28 + i29] + sgd_delta[2*i28 + i29];
  }
}

/* kernel 37: 32 threads */
extern "C" __global__ void moons_step_k37(float* __restrict__ sgd_delta, float* __restrict__ sgd_momentum, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i30 = ocannl_t / 2;
    const long long i31 = ocannl_t % 2;
    sgd_delta[2*i30 + i31] = sgd_momentum[2*i30 + i31];
  }
}

/* kernel 38: 32 threads */
extern "C" __global__ void moons_step_k38(float* __restrict__ w, float* __restrict__ learning_rate, float* __restrict__ sgd_delta, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 32LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i32 = ocannl_t / 2;
    const long long i33 = ocannl_t % 2;
    w[2*i32 + i33] = w[2*i32 + i33] - (learning_rate[0] * sgd_delta[2*i32 + i33]);
  }
}

/* kernel 39: 16 threads */
extern "C" __global__ void moons_step_k39(float* __restrict__ b_b_grad_2, float* __restrict__ sgd_delta_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i34 = ocannl_t;
    sgd_delta_1[i34] = b_b_grad_2[i34];
  }
}

/* kernel 40: 16 threads */
extern "C" __global__ void moons_step_k40(float* __restrict__ mul_3, float* __restrict__ t_0_9_1, float* __restrict__ sgd_momentum_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i35 = ocannl_t;
    mul_3[i35] = t_0_9_1[0] * sgd_momentum_1[i35];
  }
}

/* kernel 41: 16 threads */
extern "C" __global__ void moons_step_k41(float* __restrict__ sgd_delta_1, float* __restrict__ mul_3, float* __restrict__ sgd_momentum_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i36 = ocannl_t;
    sgd_momentum_1[i36] = mul_3[i36] + sgd_delta_1[i36];
  }
}

/* kernel 42: 16 threads */
extern "C" __global__ void moons_step_k42(float* __restrict__ sgd_delta_1, float* __restrict__ sgd_momentum_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i37 = ocannl_t;
    sgd_delta_1[i37] = sgd_momentum_1[i37];
  }
}

/* kernel 43: 16 threads */
extern "C" __global__ void moons_step_k43(float* __restrict__ b, float* __restrict__ learning_rate, float* __restrict__ sgd_delta_1, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i38 = ocannl_t;
    b[i38] = b[i38] - (learning_rate[0] * sgd_delta_1[i38]);
  }
}

/* kernel 44: 256 threads */
extern "C" __global__ void moons_step_k44(float* __restrict__ w_grad_1, float* __restrict__ sgd_delta_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i39 = ocannl_t / 16;
    const long long i40 = ocannl_t % 16;
    sgd_delta_2[16*i39 + i40] = w_grad_1[16*i39 + i40];
  }
}

/* kernel 45: 256 threads */
extern "C" __global__ void moons_step_k45(float* __restrict__ mul_4, float* __restrict__ t_0_9_2, float* __restrict__ sgd_momentum_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i41 = ocannl_t / 16;
    const long long i42 = ocannl_t % 16;
    mul_4[16*i41 + i42] = t_0_9_2[0] * sgd_momentum_2[16*i41 + i42];
  }
}

/* kernel 46: 256 threads */
extern "C" __global__ void moons_step_k46(float* __restrict__ sgd_delta_2, float* __restrict__ mul_4, float* __restrict__ sgd_momentum_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i43 = ocannl_t / 16;
    const long long i44 = ocannl_t % 16;
    sgd_momentum_2[16*i43 + i44] = mul_4[16*i43 + i44] + sgd_delta_2[16*i43 + i44];
  }
}

/* kernel 47: 256 threads */
extern "C" __global__ void moons_step_k47(float* __restrict__ sgd_delta_2, float* __restrict__ sgd_momentum_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i45 = ocannl_t / 16;
    const long long i46 = ocannl_t % 16;
    sgd_delta_2[16*i45 + i46] = sgd_momentum_2[16*i45 + i46];
  }
}

/* kernel 48: 256 threads */
extern "C" __global__ void moons_step_k48(float* __restrict__ w_1, float* __restrict__ learning_rate, float* __restrict__ sgd_delta_2, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 256LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i47 = ocannl_t / 16;
    const long long i48 = ocannl_t % 16;
    w_1[16*i47 + i48] = w_1[16*i47 + i48] - (learning_rate[0] * sgd_delta_2[16*i47 + i48]);
  }
}

/* kernel 49: 16 threads */
extern "C" __global__ void moons_step_k49(float* __restrict__ b_b_grad_1, float* __restrict__ sgd_delta_3, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i49 = ocannl_t;
    sgd_delta_3[i49] = b_b_grad_1[i49];
  }
}

/* kernel 50: 16 threads */
extern "C" __global__ void moons_step_k50(float* __restrict__ mul_5, float* __restrict__ t_0_9_3, float* __restrict__ sgd_momentum_3, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i50 = ocannl_t;
    mul_5[i50] = t_0_9_3[0] * sgd_momentum_3[i50];
  }
}

/* kernel 51: 16 threads */
extern "C" __global__ void moons_step_k51(float* __restrict__ sgd_delta_3, float* __restrict__ mul_5, float* __restrict__ sgd_momentum_3, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i51 = ocannl_t;
    sgd_momentum_3[i51] = mul_5[i51] + sgd_delta_3[i51];
  }
}

/* kernel 52: 16 threads */
extern "C" __global__ void moons_step_k52(float* __restrict__ sgd_delta_3, float* __restrict__ sgd_momentum_3, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i52 = ocannl_t;
    sgd_delta_3[i52] = sgd_momentum_3[i52];
  }
}

/* kernel 53: 16 threads */
extern "C" __global__ void moons_step_k53(float* __restrict__ b_b_1, float* __restrict__ learning_rate, float* __restrict__ sgd_delta_3, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i53 = ocannl_t;
    b_b_1[i53] = b_b_1[i53] - (learning_rate[0] * sgd_delta_3[i53]);
  }
}

/* kernel 54: 16 threads */
extern "C" __global__ void moons_step_k54(float* __restrict__ w_grad, float* __restrict__ sgd_delta_4, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i54 = ocannl_t;
    sgd_delta_4[i54] = w_grad[i54];
  }
}

/* kernel 55: 16 threads */
extern "C" __global__ void moons_step_k55(float* __restrict__ mul_6, float* __restrict__ t_0_9_4, float* __restrict__ sgd_momentum_4, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i55 = ocannl_t;
    mul_6[i55] = t_0_9_4[0] * sgd_momentum_4[i55];
  }
}

/* kernel 56: 16 threads */
extern "C" __global__ void moons_step_k56(float* __restrict__ sgd_delta_4, float* __restrict__ mul_6, float* __restrict__ sgd_momentum_4, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i56 = ocannl_t;
    sgd_momentum_4[i56] = mul_6[i56] + sgd_delta_4[i56];
  }
}

/* kernel 57: 16 threads */
extern "C" __global__ void moons_step_k57(float* __restrict__ sgd_delta_4, float* __restrict__ sgd_momentum_4, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i57 = ocannl_t;
    sgd_delta_4[i57] = sgd_momentum_4[i57];
  }
}

/* kernel 58: 16 threads */
extern "C" __global__ void moons_step_k58(float* __restrict__ w_2, float* __restrict__ learning_rate, float* __restrict__ sgd_delta_4, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 16LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i58 = ocannl_t;
    w_2[i58] = w_2[i58] - (learning_rate[0] * sgd_delta_4[i58]);
  }
}

/* kernel 59: 1 thread */
extern "C" __global__ void moons_step_k59(float* __restrict__ b_b_2, float* __restrict__ b_b_grad, float* __restrict__ learning_rate, float* __restrict__ sgd_delta_5, float* __restrict__ mul_7, float* __restrict__ t_0_9_5, float* __restrict__ sgd_momentum_5, int* ocannl_err) {
  sgd_delta_5[0] = b_b_grad[0];
  mul_7[0] = t_0_9_5[0] * sgd_momentum_5[0];
  sgd_momentum_5[0] = mul_7[0] + sgd_delta_5[0];
  sgd_delta_5[0] = sgd_momentum_5[0];
  b_b_2[0] = b_b_2[0] - (learning_rate[0] * sgd_delta_5[0]);
}
