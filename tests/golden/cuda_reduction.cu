/* ocannl_ast routine routine (float32), CUDA */
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)

/* kernel 0: 2 threads */
extern "C" __global__ void routine_k0(float* __restrict__ einsum, float* __restrict__ m, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 2LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i0 = ocannl_t;
    float l_acc1 = 0.0f;
    for (long long i1 = 0; i1 < 3; ++i1) {
      l_acc1 = l_acc1 + m[3*i0 + i1];
    }
    einsum[i0] = l_acc1;
  }
}
