// Portability header: the same kernel sources build for gfx12 (HIP), for NVIDIA (CUDA, to test the
// numerics on a GPU we have) and, for the scalar helpers only, as plain host C++ (CI tests).
//
// Only one thing differs in meaning between the targets: the fp8 WMMA. On gfx12 it is the compiler
// builtin (v_wmma_f32_16x16x16_fp8_fp8, wave32). Compiled as CUDA it is a software emulation with
// warp shuffles that reproduces the gfx12 wave32 fragment layout (AMD RDNA4 ISA guide, "Wave Matrix
// Multiply Accumulate"; the same layout composable_kernel's gfx12 WMMA traits encode as
// K = KLane(2) x K1PerLane(8), and C rows = lane-half x 8 + VGPR):
//
//   A (16x16, M x K, fp8):  lane l holds row m = l % 16, k = 8*(l/16) + 0..7, byte j = k offset j
//                           (two VGPRs: k 0..3 in the first, 4..7 in the second).
//   B (16x16, K x N, fp8):  lane l holds column n = l % 16, k = 8*(l/16) + 0..7, same byte order.
//   C/D (16x16, f32):       lane l, VGPR v holds D[m = v + 8*(l/16)][n = l % 16].
//
// NVIDIA warps are 32 lanes, so the lane arithmetic of every kernel line is the same on both.
// The rest of the header is plumbing: index/launch spellings, half/bf16 conversions, a byte
// permute and a wave-level LDS sync, each the same operation on every target.
#pragma once

#include <stddef.h>
#include <stdint.h>

// Weight layout the GEMM reads (kernels/hip/layout.py writes it): 1 = WMMA fragment order,
// 0 = plain [N, K/8] words. The Python side checks the loaded library's pq_wperm() against it.
#ifndef PQ_WPERM
#define PQ_WPERM 1
#endif

#if defined(__HIP__)
#define PQ_HIP 1
#if defined(PQ_NO_GPU_INCLUDES)
// CI compile check (clang-19 -nogpuinc): no HIP headers exist, so spell the attributes directly.
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#define __host__ __attribute__((host))
#define __shared__ __attribute__((shared))
#define __launch_bounds__(n) __attribute__((amdgpu_flat_work_group_size(1, n)))
#define __forceinline__ inline __attribute__((always_inline))
struct __attribute__((aligned(8))) uint2 { unsigned int x, y; };
struct __attribute__((aligned(8))) float2 { float x, y; };
static __device__ inline float2 make_float2(float x, float y) { return float2{x, y}; }
#define fminf __builtin_fminf
#define fmaxf __builtin_fmaxf
#define fabsf __builtin_fabsf
#define fmaf __builtin_fmaf
#define expf __builtin_expf
#define sqrtf __builtin_sqrtf
#else
#include <hip/hip_runtime.h>
#endif
#define PQ_DEV __device__ __forceinline__
#define PQ_HD __host__ __device__ __forceinline__
#elif defined(__CUDACC__)
#define PQ_CUDA 1
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#define PQ_DEV __device__ __forceinline__
#define PQ_HD __host__ __device__ __forceinline__
#else
#define PQ_HOST 1
#define PQ_HD inline
#endif

// ------------------------------------------------------------------ scalar helpers (every target)
PQ_HD uint32_t pq_f32_bits(float x) {
  union { float f; uint32_t u; } v; v.f = x; return v.u;
}
PQ_HD float pq_bits_f32(uint32_t u) {
  union { float f; uint32_t u; } v; v.u = u; return v.f;
}

// Byte permute: result byte b = byte (sel >> 8b) & 7 of the 8-byte value hi:lo (lo = bytes 0..3).
PQ_HD uint32_t pq_perm8(uint32_t hi, uint32_t lo, uint32_t sel) {
#if defined(PQ_HIP) && defined(__HIP_DEVICE_COMPILE__)
  return __builtin_amdgcn_perm(hi, lo, sel);
#elif defined(PQ_CUDA) && defined(__CUDA_ARCH__)
  const uint32_t s = (sel & 7u) | ((sel >> 4) & 0x70u) | ((sel >> 8) & 0x700u) | ((sel >> 12) & 0x7000u);
  return __byte_perm(lo, hi, s);
#else
  const uint64_t v = ((uint64_t)hi << 32) | lo;
  uint32_t r = 0;
  for (int b = 0; b < 4; ++b) r |= (uint32_t)((v >> (8 * ((sel >> (8 * b)) & 7u))) & 0xFFu) << (8 * b);
  return r;
#endif
}

#include "pq_e4m3.h"

#if !defined(PQ_HOST)
// ------------------------------------------------------------------ device plumbing
#if defined(PQ_HIP)
typedef int pq_v2i __attribute__((ext_vector_type(2)));
typedef float pq_v8f __attribute__((ext_vector_type(8)));
PQ_DEV int pq_tid() { return (int)__builtin_amdgcn_workitem_id_x(); }
PQ_DEV int pq_ntid() { return (int)__builtin_amdgcn_workgroup_size_x(); }
PQ_DEV int pq_bid_x() { return (int)__builtin_amdgcn_workgroup_id_x(); }
PQ_DEV int pq_bid_y() { return (int)__builtin_amdgcn_workgroup_id_y(); }
PQ_DEV int pq_bid_z() { return (int)__builtin_amdgcn_workgroup_id_z(); }
PQ_DEV int pq_lane() { return pq_tid() & 31; }
PQ_DEV float pq_shfl(float v, int src) {
  return __builtin_bit_cast(float, __builtin_amdgcn_ds_bpermute(src << 2, __builtin_bit_cast(int, v)));
}
PQ_DEV uint32_t pq_shfl_u(uint32_t v, int src) {
  return (uint32_t)__builtin_amdgcn_ds_bpermute(src << 2, (int)v);
}
// Lanes of one wave exchange values through LDS between Givens layers: the wave runs in lockstep,
// so ordering the LDS traffic (fence = s_wait dscnt) is all the sync it needs.
PQ_DEV void pq_wave_sync() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "wavefront");
  __builtin_amdgcn_wave_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "wavefront");
}
PQ_DEV float pq_h2f(uint16_t h) { return (float)__builtin_bit_cast(_Float16, h); }
PQ_DEV uint16_t pq_f2h(float x) { return __builtin_bit_cast(uint16_t, (_Float16)x); }
#else  // PQ_CUDA
PQ_DEV int pq_tid() { return (int)threadIdx.x; }
PQ_DEV int pq_ntid() { return (int)blockDim.x; }
PQ_DEV int pq_bid_x() { return (int)blockIdx.x; }
PQ_DEV int pq_bid_y() { return (int)blockIdx.y; }
PQ_DEV int pq_bid_z() { return (int)blockIdx.z; }
PQ_DEV int pq_lane() { return (int)(threadIdx.x & 31); }
PQ_DEV float pq_shfl(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
PQ_DEV uint32_t pq_shfl_u(uint32_t v, int src) { return __shfl_sync(0xffffffffu, v, src); }
PQ_DEV void pq_wave_sync() { __syncwarp(); }
PQ_DEV float pq_h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }
PQ_DEV uint16_t pq_f2h(float x) { return __half_as_ushort(__float2half_rn(x)); }
#endif

PQ_DEV float pq_bf2f(uint16_t h) { return pq_bits_f32((uint32_t)h << 16); }
PQ_DEV uint16_t pq_f2bf(float x) {  // round to nearest even; NaN stays NaN
  const uint32_t u = pq_f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)0x7fc0;
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// Exactly rounded multiply / add that the compiler may not fuse into an FMA: the reference
// (kernels/reference.py) rounds each product of a Givens update separately.
#if defined(PQ_CUDA)
PQ_DEV float pq_mul_rn(float a, float b) { return __fmul_rn(a, b); }
PQ_DEV float pq_add_rn(float a, float b) { return __fadd_rn(a, b); }
PQ_DEV float pq_sub_rn(float a, float b) { return __fsub_rn(a, b); }
PQ_DEV float pq_div_rn(float a, float b) { return __fdiv_rn(a, b); }
#else
PQ_DEV float pq_mul_rn(float a, float b) {
#pragma clang fp contract(off)
  return a * b;
}
PQ_DEV float pq_add_rn(float a, float b) {
#pragma clang fp contract(off)
  return a + b;
}
PQ_DEV float pq_sub_rn(float a, float b) {
#pragma clang fp contract(off)
  return a - b;
}
PQ_DEV float pq_div_rn(float a, float b) { return a / b; }  // HIP f32 division is correctly rounded
#endif

PQ_DEV float pq_wave_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, pq_shfl(v, pq_lane() ^ o));
  return v;
}
PQ_DEV float pq_wave_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += pq_shfl(v, pq_lane() ^ o);
  return v;
}

// ------------------------------------------------------------------ the fp8 WMMA
// One 16x16x16 fp8 x fp8 -> f32 multiply-accumulate for the whole wave, fragments as documented
// at the top of this file. a/b: the lane's 8 fp8 bytes as two words; c: the lane's 8 floats.
struct pq_acc8 { float v[8]; };
struct pq_frag8 { uint32_t lo, hi; };

#if defined(PQ_HIP)
PQ_DEV pq_acc8 pq_wmma_fp8(pq_frag8 a, pq_frag8 b, pq_acc8 c) {
  pq_v2i av = {(int)a.lo, (int)a.hi};
  pq_v2i bv = {(int)b.lo, (int)b.hi};
  pq_v8f cv;
#pragma unroll
  for (int i = 0; i < 8; ++i) cv[i] = c.v[i];
  pq_v8f d = __builtin_amdgcn_wmma_f32_16x16x16_fp8_fp8_w32_gfx12(av, bv, cv);
  pq_acc8 r;
#pragma unroll
  for (int i = 0; i < 8; ++i) r.v[i] = d[i];
  return r;
}
#else  // PQ_CUDA: software emulation of the gfx12 instruction, same fragments
PQ_DEV pq_acc8 pq_wmma_fp8(pq_frag8 a, pq_frag8 b, pq_acc8 c) {
  const int lane = pq_lane();
  const int n = lane & 15, half = lane >> 4;
  // column n of B: k 0..7 live in lane n, k 8..15 in lane n + 16
  const uint32_t bw[4] = {pq_shfl_u(b.lo, n), pq_shfl_u(b.hi, n), pq_shfl_u(b.lo, n + 16),
                          pq_shfl_u(b.hi, n + 16)};
  float bf[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) bf[k] = pq_e4m3_decode((uint8_t)(bw[k >> 2] >> (8 * (k & 3))));
  pq_acc8 r;
#pragma unroll
  for (int v = 0; v < 8; ++v) {
    const int m = v + 8 * half;  // this lane's output row for VGPR v
    const uint32_t aw[4] = {pq_shfl_u(a.lo, m), pq_shfl_u(a.hi, m), pq_shfl_u(a.lo, m + 16),
                            pq_shfl_u(a.hi, m + 16)};
    float acc = c.v[v];
#pragma unroll
    for (int k = 0; k < 16; ++k)
      acc = fmaf(pq_e4m3_decode((uint8_t)(aw[k >> 2] >> (8 * (k & 3)))), bf[k], acc);
    r.v[v] = acc;
  }
  return r;
}
#endif
#endif  // !PQ_HOST
