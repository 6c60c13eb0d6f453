// What the two fp8 WMMA GEMMs share (pq_gemm.hip: int4 weights, pq_mxfp4_gemm.hip: MXFP4 weights):
// the output store per dtype, the weight-word address in either layout (both pack 4-bit codes the
// same way, kernels/hip/layout.py `pack_words`), the split-K reduce and the host-side shape check.
#pragma once
#include "pq_compat.h"

enum { PQ_OUT_F16 = 0, PQ_OUT_BF16 = 1, PQ_OUT_F32 = 2 };

template <int OUT>
PQ_DEV void pq_store(void* out, size_t idx, float v) {
  if (OUT == PQ_OUT_F32) static_cast<float*>(out)[idx] = v;
  else if (OUT == PQ_OUT_BF16) static_cast<uint16_t*>(out)[idx] = pq_f2bf(v);
  else static_cast<uint16_t*>(out)[idx] = pq_f2h(v);
}

// The lane's word of 8 codes for (n-tile, group g, k-step ks): column 16 * n_tile + lane % 16,
// k = 128 g + 16 ks + 8 (lane / 16) + 0..7, byte b holding k offset b (low nibble) and b + 4 (high).
PQ_DEV uint32_t pq_wword(const uint32_t* __restrict__ wq, int n_tile, int lane, int K, int g, int ks) {
#if PQ_WPERM
  return wq[((size_t)n_tile * (K / 16) + g * 8 + ks) * 32 + lane];
#else
  const int n = n_tile * 16 + (lane & 15);
  return wq[(size_t)n * (K / 8) + g * 16 + ks * 2 + (lane >> 4)];
#endif
}

// Split-K partials [nsplit, M, N] f32 -> out [M, N] in the output dtype (fixed order: deterministic).
template <int OUT>
PQ_DEV void pq_splitk_reduce_body(const float* __restrict__ part, void* __restrict__ out, int MN, int nsplit) {
  const int i = pq_bid_x() * pq_ntid() + pq_tid();
  if (i >= MN) return;
  float s = 0.f;
  for (int z = 0; z < nsplit; ++z) s += part[(size_t)z * MN + i];
  pq_store<OUT>(out, (size_t)i, s);
}

// The sources build as one translation unit (build.py), so these two kernels exist once.
extern "C" __global__ void __launch_bounds__(256) pq_splitk_reduce_f16(const float* p, void* o, int MN, int s) {
  pq_splitk_reduce_body<PQ_OUT_F16>(p, o, MN, s);
}
extern "C" __global__ void __launch_bounds__(256) pq_splitk_reduce_bf16(const float* p, void* o, int MN, int s) {
  pq_splitk_reduce_body<PQ_OUT_BF16>(p, o, MN, s);
}

#if !defined(PQ_NO_GPU_INCLUDES)
#include "pq_launch.h"

// K whole 128-groups, N whole 16-column tiles, boundaries increasing and on the wave tile.
static int pq_gemm_check(int M, int N, int K, int pb1, int pb2, int wave_cols) {
  if (K % 128 || N % 16 || M < 0) return PQ_EINVAL;
  if (pb1 < 0 || pb2 < pb1 || (pb1 < N && pb1 % wave_cols) || (pb2 < N && pb2 % wave_cols)) return PQ_EINVAL;
  return 0;
}

// Split-K partials -> out, on the stream the GEMM ran on.
static void pq_splitk_reduce(const float* partial, void* out, int MN, int nsplit, int out_is_bf16, pq_stream st) {
  if (out_is_bf16) pq_splitk_reduce_bf16<<<(MN + 255) / 256, 256, 0, st>>>(partial, out, MN, nsplit);
  else pq_splitk_reduce_f16<<<(MN + 255) / 256, 256, 0, st>>>(partial, out, MN, nsplit);
}
#endif
