// pq_mxfp4_fp8_gemm: out[M, N] = A[M, K] (e4m3 from pq_rotate_quant, per-group or per-token scales)
// x W^T (MXFP4: e2m1 codes, one e8m0 exponent e per 32 along K) on the fp8 WMMA.
//
// Layout trick (kernels/hip/mxfp4_layout.py writes the weight side): each e8m0 exponent is split into
// a per-column power of two rsc = 2^(r - 127) and a per-block offset d = e - r, and 2^d is folded into
// the e4m3 operand while the codes are staged (pq_e2m1.h: one byte permute per four weights from a
// per-block table), so nothing but WMMAs runs per k-step and e2m1 has no zero point to correct:
//
//   fold:             acc += asg * WMMA_group(a, E2M1 * 2^d)       out = rsc * acc
//   fold, per-token:  acc  = WMMA_all_k(a, E2M1 * 2^d)             out = rsc * as * acc
//   block (fallback): acc += (asg * 2^(e - 127)) * WMMA_block(a, E2M1)
//
// r = (largest exponent of the column's nonzero blocks) - 6, so d <= 6 always; a layer where some
// nonzero block has d < -5 (more than 11 binades below its column's largest) is prepared for the
// per-block kernels instead, exact for every e8m0 byte at one multiply-add per output per block.
//
//   a, asr  as pq_gemm.hip (the row sums are not read)
//   wq      the 4-bit codes packed exactly as pq_gemm.hip packs int4 codes (PQ_WPERM, pq_wword)
//   ex      [K/128, N] u32, byte b for block b of the group: o8 = 8 * (d + 5) (fold), or e (block)
//   rsc     [N] f32: 2^(r - 127) (fold), 1 (block)
// Merged linears: columns [pb1, pb2) read rotated copy 1 of a/asr, [pb2, N) copy 2, per wave.
#include "pq_gemm_common.h"
#include "pq_e2m1.h"

enum { PQ_MX_FOLD = 0, PQ_MX_FOLD_TOKEN = 1, PQ_MX_BLOCK = 2 };

// 2^(e - 127) for an e8m0 byte (e = 0: the f32 subnormal 2^-127)
PQ_DEV float pq_e8m0_f32(uint32_t e) { return pq_bits_f32(e ? e << 23 : 0x00400000u); }

// The output dtype is a launch argument, not a template one: it only touches the store, and one
// kernel per dtype would triple the kernels (and the emulated build's time) for no speed.
PQ_DEV void pq_store_kind(void* out, size_t idx, float v, int kind) {
  if (kind == PQ_OUT_F32) pq_store<PQ_OUT_F32>(out, idx, v);
  else if (kind == PQ_OUT_BF16) pq_store<PQ_OUT_BF16>(out, idx, v);
  else pq_store<PQ_OUT_F16>(out, idx, v);
}

// One wave computes a (16*MT) x (16*NT) tile over groups [g0, g1); WM x WN waves per workgroup.
template <int MT, int NT, int WM, int WN, int MODE>
PQ_DEV void pq_mxfp4_gemm_body(const uint8_t* __restrict__ A, const float2* __restrict__ asr,
                               const uint32_t* __restrict__ wq, const uint32_t* __restrict__ ex,
                               const float* __restrict__ rsc, void* __restrict__ out, int out_kind, int M,
                               int N, int K, int pb1, int pb2, int nsplit) {
  const int lane = pq_lane(), wave = pq_tid() >> 5;
  const int G = K / 128;
  const int m0 = pq_bid_y() * (WM * MT * 16) + (wave / WN) * (MT * 16);
  const int n0 = pq_bid_x() * (WN * NT * 16) + (wave % WN) * (NT * 16);
  if (n0 >= N || m0 >= M) return;  // wave-uniform; no workgroup barrier in this kernel
  const int kz = pq_bid_z();  // split-K slice: groups [kz*G/nsplit, (kz+1)*G/nsplit)
  const int prt = (n0 >= pb1 ? 1 : 0) + (n0 >= pb2 ? 1 : 0);
  A += (size_t)prt * M * K;
  asr += (size_t)prt * M * G;

  // acc: the output; part: the WMMA sum of one group (fold) or one block (block mode)
  pq_acc8 acc[MT][NT], part[MT][NT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int v = 0; v < 8; ++v) acc[mt][nt].v[v] = part[mt][nt].v[v] = 0.f;

  bool nvalid[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) nvalid[nt] = n0 + nt * 16 < N;

  const int g0 = (int)((long long)kz * G / nsplit), g1 = (int)((long long)(kz + 1) * G / nsplit);
  for (int g = g0; g < g1; ++g) {
    uint32_t exw[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) exw[nt] = nvalid[nt] ? ex[(size_t)g * N + n0 + nt * 16 + (lane & 15)] : 0u;
    float as[MT][8];  // block mode: the group's activation scales, read once for its four blocks
    if (MODE == PQ_MX_BLOCK) {
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int v = 0; v < 8; ++v) {
          const int row = m0 + mt * 16 + v + 8 * (lane >> 4);
          as[mt][v] = row < M ? asr[(size_t)row * G + g].x : 0.f;
        }
    }
#pragma unroll 1
    for (int b = 0; b < 4; ++b) {  // the group's four e8m0 blocks, two k-steps each
      uint32_t tlo[NT], thi[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const uint32_t o8 = MODE == PQ_MX_BLOCK ? (uint32_t)PQ_E2M1_O8_UNIT : (exw[nt] >> (8 * b)) & 0xffu;
        tlo[nt] = pq_e2m1_table_lo(o8);
        thi[nt] = pq_e2m1_table_hi(o8);
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int ks = 2 * b + h;
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
          const uint32_t w = nvalid[nt] ? pq_wword(wq, n0 / 16 + nt, lane, K, g, ks) : 0u;
          bf[nt].lo = pq_e2m1_to_fp8(w & 0x0F0F0F0Fu, tlo[nt], thi[nt]);
          bf[nt].hi = pq_e2m1_to_fp8((w >> 4) & 0x0F0F0F0Fu, tlo[nt], thi[nt]);
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            if (MODE == PQ_MX_FOLD_TOKEN) acc[mt][nt] = pq_wmma_fp8(af[mt], bf[nt], acc[mt][nt]);
            else part[mt][nt] = pq_wmma_fp8(af[mt], bf[nt], part[mt][nt]);
          }
      }
      if (MODE == PQ_MX_BLOCK) {  // the block's partial times its activation scale and 2^(e - 127)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const float sb = pq_e8m0_f32((exw[nt] >> (8 * b)) & 0xffu);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int v = 0; v < 8; ++v) {
              acc[mt][nt].v[v] = fmaf(as[mt][v] * sb, part[mt][nt].v[v], acc[mt][nt].v[v]);
              part[mt][nt].v[v] = 0.f;
            }
        }
      }
    }
    if (MODE == PQ_MX_FOLD) {  // the group's partial times its activation scale
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int v = 0; v < 8; ++v) {
          const int row = m0 + mt * 16 + v + 8 * (lane >> 4);
          const float as = row < M ? asr[(size_t)row * G + g].x : 0.f;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            acc[mt][nt].v[v] = fmaf(as, part[mt][nt].v[v], acc[mt][nt].v[v]);
            part[mt][nt].v[v] = 0.f;
          }
        }
    }
  }
  // store: the column's power of two (and the row's one scale, per-token); split-K partials go to
  // out + kz * M * N (f32), the single-pass path straight to out
  const size_t base = out_kind == PQ_OUT_F32 ? (size_t)kz * M * N : 0;
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    if (!nvalid[nt]) continue;
    const int n = n0 + nt * 16 + (lane & 15);
    const float rs = rsc[n];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int v = 0; v < 8; ++v) {
        const int row = m0 + mt * 16 + v + 8 * (lane >> 4);
        if (row >= M) continue;
        const float s = MODE == PQ_MX_FOLD_TOKEN ? rs * asr[(size_t)row * G].x : rs;
        pq_store_kind(out, base + (size_t)row * N + n, acc[mt][nt].v[v] * s, out_kind);
      }
  }
}

#define PQ_MX_ARGS                                                                                 \
  const uint8_t *A, const float2 *asr, const uint32_t *wq, const uint32_t *ex, const float *rsc,  \
      void *out, int out_kind, int M, int N, int K, int pb1, int pb2, int nsplit
#define PQ_MX_KERNEL(NAME, MT, NT, WM, WN, MODE)                                                   \
  extern "C" __global__ void __launch_bounds__(32 * WM * WN) NAME(PQ_MX_ARGS) {                    \
    pq_mxfp4_gemm_body<MT, NT, WM, WN, MODE>(A, asr, wq, ex, rsc, out, out_kind, M, N, K, pb1, pb2, nsplit); \
  }
// decode band: one wave per 16 columns covering all (<= 16*MT) rows, 4 waves per workgroup
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_decode_fold_m1, 1, 1, 1, 4, PQ_MX_FOLD)
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_decode_fold_m2, 2, 1, 1, 4, PQ_MX_FOLD)
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_decode_fold_m4, 4, 1, 1, 4, PQ_MX_FOLD)
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_decode_blk_m1, 1, 1, 1, 4, PQ_MX_BLOCK)
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_decode_blk_m2, 2, 1, 1, 4, PQ_MX_BLOCK)
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_decode_blk_m4, 4, 1, 1, 4, PQ_MX_BLOCK)
// prefill band: 2 x 2 waves, each 32 x 32 (2 x 2 WMMA tiles): 64 x 64 per workgroup
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_prefill_fold, 2, 2, 2, 2, PQ_MX_FOLD)
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_prefill_fold_tok, 2, 2, 2, 2, PQ_MX_FOLD_TOKEN)
PQ_MX_KERNEL(pq_mxfp4_fp8_gemm_prefill_blk, 2, 2, 2, 2, PQ_MX_BLOCK)

#if !defined(PQ_NO_GPU_INCLUDES)
#define PQ_MX_CALL a, ap, wq, ex, rsc, dst, kind, M, N, K, pb1, pb2, nsplit

// Decode band (M <= 64): split-K over `nsplit` group slices; nsplit > 1 needs `partial`, an f32
// scratch of nsplit * M * N allocated by the caller (never inside a launch: graph capture).
// per_block: the layout was prepared for the per-block kernels (mxfp4_layout.py decides).
extern "C" int pq_mxfp4_fp8_gemm_decode(const uint8_t* a, const float* asr, const uint32_t* wq,
                                        const uint32_t* ex, const float* rsc, void* out, int out_is_bf16,
                                        float* partial, int M, int N, int K, int pb1, int pb2, int nsplit,
                                        int per_block, void* stream) {
  if (M == 0) return 0;
  if (int e = pq_gemm_check(M, N, K, pb1, pb2, 16)) return e;
  if (M > 64 || nsplit < 1 || nsplit > K / 128 || (nsplit > 1 && !partial)) return PQ_EINVAL;
  const pq_stream st = (pq_stream)stream;
  const int mt = M <= 16 ? 1 : (M <= 32 ? 2 : 4);
  const int kind = nsplit > 1 ? PQ_OUT_F32 : (out_is_bf16 ? PQ_OUT_BF16 : PQ_OUT_F16);
  const dim3 grid((N + 63) / 64, 1, nsplit), block(128);
  void* dst = nsplit > 1 ? (void*)partial : out;
  const float2* ap = (const float2*)asr;
#define PQ_MXD(PREFIX)                                                         \
  do {                                                                         \
    if (mt == 1) PREFIX##_m1<<<grid, block, 0, st>>>(PQ_MX_CALL);              \
    else if (mt == 2) PREFIX##_m2<<<grid, block, 0, st>>>(PQ_MX_CALL);         \
    else PREFIX##_m4<<<grid, block, 0, st>>>(PQ_MX_CALL);                      \
  } while (0)
  if (per_block) PQ_MXD(pq_mxfp4_fp8_gemm_decode_blk);
  else PQ_MXD(pq_mxfp4_fp8_gemm_decode_fold);
#undef PQ_MXD
  if (nsplit > 1) pq_splitk_reduce(partial, out, M * N, nsplit, out_is_bf16, st);
  return pq_last_error();
}

// Prefill band: 64 x 64 output tiles, A and W fragments read straight from global memory.
// per_token: asr holds one scale per row (pq_rotate_quant per_token=1), so the fold kernel keeps
// the WMMA accumulating over all of K and scales once at the end.
extern "C" int pq_mxfp4_fp8_gemm_prefill(const uint8_t* a, const float* asr, const uint32_t* wq,
                                         const uint32_t* ex, const float* rsc, void* out, int out_is_bf16,
                                         int M, int N, int K, int pb1, int pb2, int per_block, int per_token,
                                         void* stream) {
  if (M == 0) return 0;
  if (int e = pq_gemm_check(M, N, K, pb1, pb2, 32)) return e;
  const pq_stream st = (pq_stream)stream;
  const dim3 grid((N + 63) / 64, (M + 63) / 64, 1), block(128);
  const float2* ap = (const float2*)asr;
  void* dst = out;
  const int kind = out_is_bf16 ? PQ_OUT_BF16 : PQ_OUT_F16, nsplit = 1;
  if (per_block) pq_mxfp4_fp8_gemm_prefill_blk<<<grid, block, 0, st>>>(PQ_MX_CALL);
  else if (per_token) pq_mxfp4_fp8_gemm_prefill_fold_tok<<<grid, block, 0, st>>>(PQ_MX_CALL);
  else pq_mxfp4_fp8_gemm_prefill_fold<<<grid, block, 0, st>>>(PQ_MX_CALL);
  return pq_last_error();
}
#undef PQ_MX_CALL
#endif
