// FAKE HIP runtime header (declarations only, no AMD toolchain here): lets clang-19 check the host
// side of the C ABI (launch syntax, stream types) as HIP. Not a runtime; nothing is linked against it.
#pragma once
#include <stddef.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
struct dim3 { unsigned x, y, z; __host__ __device__ dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
typedef struct ihipStream_t* hipStream_t;
typedef int hipError_t;
extern "C" hipError_t hipGetLastError();
extern "C" hipError_t __hipPushCallConfiguration(dim3, dim3, size_t, hipStream_t);
extern "C" hipError_t __hipPopCallConfiguration(dim3*, dim3*, size_t*, hipStream_t*);
extern "C" hipError_t hipLaunchKernel(const void*, dim3, dim3, void**, size_t, hipStream_t);
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct __attribute__((aligned(8))) float2 { float x, y; };
static __host__ __device__ inline float2 make_float2(float x, float y) { return float2{x, y}; }
#define fminf __builtin_fminf
#define fmaxf __builtin_fmaxf
#define fabsf __builtin_fabsf
#define fmaf __builtin_fmaf
#define expf __builtin_expf
#define sqrtf __builtin_sqrtf
