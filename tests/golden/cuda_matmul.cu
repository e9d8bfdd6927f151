/* ocannl_ast routine routine (float32), CUDA */
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)

/* kernel 0: 8 threads */
extern "C" __global__ void routine_k0(float* __restrict__ einsum, float* __restrict__ a, float* __restrict__ b, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 8LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i0 = ocannl_t / 4;
    const long long i1 = ocannl_t % 4;
    float l_acc1 = 0.0f;
    for (long long i2 = 0; i2 < 3; ++i2) {
      l_acc1 = l_acc1 + (a[3*i0 + i2] * b[4*i2 + i1]);
    }
    einsum[4*i0 + i1] = l_acc1;
  }
}
