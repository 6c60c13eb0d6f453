// pq_int4_fp8_gemm: out[M, N] = A[M, K] (e4m3, per-group or per-token scales) x W^T (uint4
// asymmetric, group 128) on the fp8 WMMA, with the zero point kept out of the matmul:
//
//   per group g:  acc += asg * (sc * WMMA(a, c - 8) - (sc * d) * rowsum),   d = zp - 8
//
// (c - 8) is exact in e4m3; rowsum is the group's sum of decoded activation codes (written by
// pq_rotate_quant), so the asymmetric zero costs one FMA per output per group, not one per weight.
//
// Layout (kernels/hip/layout.py `prepare` writes the weight side):
//   a    [R, M, K] u8 e4m3 codes; asr [R, M, K/128] {f32 scale, f32 rowsum} (per-token scales are
//        the row's scale repeated per group, so both bands read the same way)
//   wq   PQ_WPERM=1: [N/16, K/16, 32] u32, one word per lane per (n-tile, k-step), lane l holding
//        column n = 16*nt + l%16, k = 16*ks + 8*(l/16) + 0..7 (the WMMA B fragment);
//        PQ_WPERM=0: [N, K/8] u32, word (n, kb) holding k = 8*kb + 0..7.
//        In both, byte b of a word holds k offset b in its low nibble and b + 4 in its high nibble,
//        so one AND and one shift give the two fragment words.
//   sz   [K/128, N] u32 = {f16 scale, f16 d}: one 4-byte load per column per group; sc * d is
//        formed in f32 here (exact: 11 x 4 bits), not stored rounded to f16.
// Merged linears: columns [0, pb1) use rotation 0 of A/asr, [pb1, pb2) rotation 1, the rest
// rotation 2; each wave picks its rotation from its first column (boundaries are multiples of the
// wave tile, checked by the caller).
#include "pq_gemm_common.h"

// One wave computes a (16*MT) x (16*NT) tile over groups [g0, g1); WM x WN waves per workgroup.
template <int MT, int NT, int WM, int WN, int OUT>
PQ_DEV void pq_gemm_body(const uint8_t* __restrict__ A, const float2* __restrict__ asr,
                         const uint32_t* __restrict__ wq, const uint32_t* __restrict__ sz,
                         void* __restrict__ out, int M, int N, int K, int pb1, int pb2, int nsplit) {
  const int lane = pq_lane(), wave = pq_tid() >> 5;
  const int G = K / 128;
  const int m0 = pq_bid_y() * (WM * MT * 16) + (wave / WN) * (MT * 16);
  const int n0 = pq_bid_x() * (WN * NT * 16) + (wave % WN) * (NT * 16);
  if (n0 >= N || m0 >= M) return;  // wave-uniform; no workgroup barrier in this kernel
  const int kz = pq_bid_z();  // split-K slice: groups [kz*G/nsplit, (kz+1)*G/nsplit)
  const int prt = (n0 >= pb1 ? 1 : 0) + (n0 >= pb2 ? 1 : 0);
  A += (size_t)prt * M * K;
  asr += (size_t)prt * M * G;

  pq_acc8 acc[MT][NT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int v = 0; v < 8; ++v) acc[mt][nt].v[v] = 0.f;

  bool nvalid[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) nvalid[nt] = n0 + nt * 16 < N;

  const int g0 = (int)((long long)kz * G / nsplit), g1 = (int)((long long)(kz + 1) * G / nsplit);
  for (int g = g0; g < g1; ++g) {
    pq_acc8 wm[MT][NT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int v = 0; v < 8; ++v) wm[mt][nt].v[v] = 0.f;
#pragma unroll 2
    for (int ks = 0; ks < 8; ++ks) {
      pq_frag8 af[MT], bf[NT];
      const int k = g * 128 + ks * 16 + 8 * (lane >> 4);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        const int row = m0 + mt * 16 + (lane & 15);
        if (row < M) {
          const uint2 w = *reinterpret_cast<const uint2*>(A + (size_t)row * K + k);
          af[mt].lo = w.x; af[mt].hi = w.y;
        } else {
          af[mt].lo = 0u; af[mt].hi = 0u;
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint32_t w = nvalid[nt] ? pq_wword(wq, n0 / 16 + nt, lane, K, g, ks) : 0x88888888u;
        bf[nt].lo = pq_codes_to_fp8(w & 0x0F0F0F0Fu);
        bf[nt].hi = pq_codes_to_fp8((w >> 4) & 0x0F0F0F0Fu);
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) wm[mt][nt] = pq_wmma_fp8(af[mt], bf[nt], wm[mt][nt]);
    }
    // zero point and scales, once per group
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int n = n0 + nt * 16 + (lane & 15);
      const uint32_t w = nvalid[nt] ? sz[(size_t)g * N + n] : 0u;
      const float sc = pq_h2f((uint16_t)(w & 0xffffu));
      const float zs = sc * pq_h2f((uint16_t)(w >> 16));
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int v = 0; v < 8; ++v) {
          const int row = m0 + mt * 16 + v + 8 * (lane >> 4);
          const float2 ar = row < M ? asr[(size_t)row * G + g] : make_float2(0.f, 0.f);
          acc[mt][nt].v[v] += ar.x * (sc * wm[mt][nt].v[v] - zs * ar.y);
        }
      }
    }
  }
  // store: split-K partials go to out + kz * M * N (f32), the single-pass path straight to out
  const size_t base = OUT == PQ_OUT_F32 ? (size_t)kz * M * N : 0;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (!nvalid[nt]) continue;
    const int n = n0 + nt * 16 + (lane & 15);
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int v = 0; v < 8; ++v) {
        const int row = m0 + mt * 16 + v + 8 * (lane >> 4);
        if (row < M) pq_store<OUT>(out, base + (size_t)row * N + n, acc[mt][nt].v[v]);
      }
  }
}

#define PQ_GEMM_ARGS                                                                              \
  const uint8_t *A, const float2 *asr, const uint32_t *wq, const uint32_t *sz, void *out, int M, \
      int N, int K, int pb1, int pb2, int nsplit
#define PQ_GEMM_KERNEL(NAME, MT, NT, WM, WN, OUT)                                                  \
  extern "C" __global__ void __launch_bounds__(32 * WM * WN) NAME(PQ_GEMM_ARGS) {                  \
    pq_gemm_body<MT, NT, WM, WN, OUT>(A, asr, wq, sz, out, M, N, K, pb1, pb2, nsplit);            \
  }
// decode band: one wave per 16 columns covering all (<= 16*MT) rows, 4 waves per workgroup
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m1_f16, 1, 1, 1, 4, PQ_OUT_F16)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m1_bf16, 1, 1, 1, 4, PQ_OUT_BF16)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m1_f32, 1, 1, 1, 4, PQ_OUT_F32)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m2_f16, 2, 1, 1, 4, PQ_OUT_F16)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m2_bf16, 2, 1, 1, 4, PQ_OUT_BF16)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m2_f32, 2, 1, 1, 4, PQ_OUT_F32)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m4_f16, 4, 1, 1, 4, PQ_OUT_F16)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m4_bf16, 4, 1, 1, 4, PQ_OUT_BF16)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_decode_m4_f32, 4, 1, 1, 4, PQ_OUT_F32)
// prefill band: 2 x 2 waves, each 32 x 32 (2 x 2 WMMA tiles): 64 x 64 per workgroup
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_prefill_f16, 2, 2, 2, 2, PQ_OUT_F16)
PQ_GEMM_KERNEL(pq_int4_fp8_gemm_prefill_bf16, 2, 2, 2, 2, PQ_OUT_BF16)

#if !defined(PQ_NO_GPU_INCLUDES)
extern "C" int pq_wperm() { return PQ_WPERM; }

// Decode band (M <= 64): split-K over `nsplit` group slices; nsplit > 1 needs `partial`, an f32
// scratch of nsplit * M * N allocated by the caller (never inside a launch: graph capture).
extern "C" int pq_int4_fp8_gemm_decode(const uint8_t* a, const float* asr, const uint32_t* wq,
                                       const uint32_t* sz, void* out, int out_is_bf16, float* partial,
                                       int M, int N, int K, int pb1, int pb2, int nsplit, void* stream) {
  if (M == 0) return 0;
  if (int e = pq_gemm_check(M, N, K, pb1, pb2, 16)) return e;
  if (M > 64 || nsplit < 1 || nsplit > K / 128 || (nsplit > 1 && !partial)) return PQ_EINVAL;
  const pq_stream st = (pq_stream)stream;
  const int mt = M <= 16 ? 1 : (M <= 32 ? 2 : 4);
  const dim3 grid((N + 63) / 64, 1, nsplit), block(128);
  void* dst = nsplit > 1 ? (void*)partial : out;
  const float2* ap = (const float2*)asr;
#define PQ_DEC(MT, SUF) pq_int4_fp8_gemm_decode_m##MT##_##SUF<<<grid, block, 0, st>>>(a, ap, wq, sz, dst, M, N, K, pb1, pb2, nsplit)
  if (nsplit > 1) {
    if (mt == 1) PQ_DEC(1, f32); else if (mt == 2) PQ_DEC(2, f32); else PQ_DEC(4, f32);
    pq_splitk_reduce(partial, out, M * N, nsplit, out_is_bf16, st);
  } else if (out_is_bf16) {
    if (mt == 1) PQ_DEC(1, bf16); else if (mt == 2) PQ_DEC(2, bf16); else PQ_DEC(4, bf16);
  } else {
    if (mt == 1) PQ_DEC(1, f16); else if (mt == 2) PQ_DEC(2, f16); else PQ_DEC(4, f16);
  }
#undef PQ_DEC
  return pq_last_error();
}

// Prefill band: 64 x 64 output tiles, A and W fragments read straight from global memory.
extern "C" int pq_int4_fp8_gemm_prefill(const uint8_t* a, const float* asr, const uint32_t* wq,
                                        const uint32_t* sz, void* out, int out_is_bf16, int M, int N,
                                        int K, int pb1, int pb2, void* stream) {
  if (M == 0) return 0;
  if (int e = pq_gemm_check(M, N, K, pb1, pb2, 32)) return e;
  const dim3 grid((N + 63) / 64, (M + 63) / 64, 1), block(128);
  const float2* ap = (const float2*)asr;
  if (out_is_bf16)
    pq_int4_fp8_gemm_prefill_bf16<<<grid, block, 0, (pq_stream)stream>>>(a, ap, wq, sz, out, M, N, K, pb1, pb2, 1);
  else
    pq_int4_fp8_gemm_prefill_f16<<<grid, block, 0, (pq_stream)stream>>>(a, ap, wq, sz, out, M, N, K, pb1, pb2, 1);
  return pq_last_error();
}
#endif
