/* ocannl_ast routine routine (float32), CUDA */
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fc00000)

/* kernel 0: 6 threads */
/* constant: s = 2 */
extern "C" __global__ void routine_k0(float* __restrict__ mul, float* __restrict__ m, int* ocannl_err) {
  for (long long ocannl_t = (long long)blockIdx.x * blockDim.x + threadIdx.x; ocannl_t < 6LL; ocannl_t += (long long)gridDim.x * blockDim.x) {
    const long long i0 = ocannl_t / 3;
    const long long i1 = ocannl_t % 3;
    mul[3*i0 + i1] = 2.0f * m[3*i0 + i1];
  }
}
