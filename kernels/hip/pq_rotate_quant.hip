// pq_rotate_quant: channel scale + krot Givens layers per 128-group + amax + e4m3 encode +
// code-domain row sums, one launch.
//
// Layout (kernels/hip/layout.py `prepare` writes the inputs):
//   x    [M, K] f16 or bf16          activations (row stride ldx elements)
//   cs   [R, K] f32                  channel scales per distinct rotation r (multiply)
//   rec  [R, krot, K/2] x 16 B       {u32 i | j << 8 (local to the 128-group), f32 cos, f32 sin, 0}
//   a    [R, M, K] u8                e4m3 codes of the rotated activations
//   asr  [R, M, K/128] x {f32 scale, f32 rowsum}: x ~= code * scale; rowsum = sum of the group's
//        decoded codes (the GEMM's zero-point term), interleaved so the GEMM reads both in 8 bytes.
//
// Per-group mode (the decode band): one workgroup per (rotation, group, token chunk); each wave
// owns one token at a time, its lanes own 4 channels each, and the Givens pairs (2 per lane per
// layer) are held in registers for the whole chunk. A layer's 64 pairs partition the group, so
// layers need only a wave-level LDS sync, never a workgroup barrier.
// Per-token mode (above the decode band): the scale is a row max, so a wave owns a whole row:
// pass 1 rotates every group for its amax, pass 2 rotates again and encodes (rotating twice is
// cheaper than holding K floats per row in LDS).
// Arithmetic follows kernels/reference.py exactly (products rounded separately, x / scale), so
// codes and scales are byte-identical to the reference quantizers (e4m3(-0) is written as +0).
#include "pq_compat.h"

#define PQ_WAVES 4
#define PQ_TOK_PER_WAVE 4
#define PQ_MAX_KROT 8

struct pq_rec { uint32_t ij; float c, s; uint32_t pad; };

template <bool BF16>
PQ_DEV void pq_load4(const uint16_t* p, float v[4]) {
  const uint2 w = *reinterpret_cast<const uint2*>(p);
  const uint16_t h[4] = {(uint16_t)(w.x & 0xffffu), (uint16_t)(w.x >> 16), (uint16_t)(w.y & 0xffffu),
                         (uint16_t)(w.y >> 16)};
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = BF16 ? pq_bf2f(h[e]) : pq_h2f(h[e]);
}

// Rotate one token's group in place: v holds this lane's channels 4*lane .. 4*lane+3 on entry
// (already channel-scaled) and on exit. xs is the wave's 128-float LDS row.
PQ_DEV void pq_givens(float v[4], float* xs, const pq_rec rec[PQ_MAX_KROT][2], int krot) {
  const int lane = pq_lane();
#pragma unroll
  for (int e = 0; e < 4; ++e) xs[4 * lane + e] = v[e];
  pq_wave_sync();
#pragma unroll
  for (int r = 0; r < PQ_MAX_KROT; ++r) {
    if (r < krot) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = rec[r][h].ij & 0xffu, j = rec[r][h].ij >> 8;
        const float c = rec[r][h].c, s = rec[r][h].s;
        const float xi = xs[i], xj = xs[j];
        xs[i] = pq_add_rn(pq_mul_rn(c, xi), pq_mul_rn(s, xj));
        xs[j] = pq_sub_rn(pq_mul_rn(c, xj), pq_mul_rn(s, xi));
      }
      pq_wave_sync();
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = xs[4 * lane + e];
  pq_wave_sync();  // the next token overwrites xs
}

PQ_DEV void pq_load_rec(pq_rec rec[PQ_MAX_KROT][2], const pq_rec* rp, int krot, int K, int g) {
  const int lane = pq_lane();
#pragma unroll
  for (int r = 0; r < PQ_MAX_KROT; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (r < krot) rec[r][h] = rp[(size_t)r * (K / 2) + g * 64 + lane + 32 * h];
      else rec[r][h] = pq_rec{0u, 1.f, 0.f, 0u};
    }
  }
}

// Encode 4 channels with scale a; returns the lane's share of the group's code-domain row sum.
PQ_DEV float pq_encode4(const float v[4], float a, uint8_t* dst) {
  const float safe = a > 0.f ? a : 1.f;
  uint32_t packed = 0;
  float sum = 0.f;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint8_t q = pq_e4m3_encode(pq_div_rn(v[e], safe));  // saturates to +-448 itself
    packed |= (uint32_t)q << (8 * e);
    sum += pq_e4m3_decode(q);
  }
  *reinterpret_cast<uint32_t*>(dst) = packed;
  return sum;
}

template <bool BF16, bool PTOK>
PQ_DEV void pq_rotate_quant_body(const uint16_t* __restrict__ x, int ldx, const float* __restrict__ cs,
                                 const pq_rec* __restrict__ rec, uint8_t* __restrict__ a,
                                 float2* __restrict__ asr, int M, int K, int krot) {
  __shared__ float xs_all[PQ_WAVES][128];
  const int lane = pq_lane(), wave = pq_tid() >> 5;
  const int G = K / 128;
  const int rot = pq_bid_z();
  float* xs = xs_all[wave];
  cs += (size_t)rot * K;
  rec += (size_t)rot * krot * (K / 2);
  a += (size_t)rot * M * K;
  asr += (size_t)rot * M * G;
  pq_rec rr[PQ_MAX_KROT][2];

  if (!PTOK) {
    const int g = pq_bid_x();
    pq_load_rec(rr, rec, krot, K, g);
    const int c0 = g * 128 + 4 * lane;
    float csv[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) csv[e] = cs[c0 + e];
    const int m_begin = pq_bid_y() * PQ_WAVES * PQ_TOK_PER_WAVE;
    for (int t = 0; t < PQ_TOK_PER_WAVE; ++t) {
      const int m = m_begin + t * PQ_WAVES + wave;
      if (m >= M) break;  // wave-uniform
      float v[4];
      pq_load4<BF16>(x + (size_t)m * ldx + c0, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = pq_mul_rn(v[e], csv[e]);
      pq_givens(v, xs, rr, krot);
      float amax = 0.f;
#pragma unroll
      for (int e = 0; e < 4; ++e) amax = fmaxf(amax, fabsf(v[e]));
      amax = pq_wave_max(amax);
      const float sc = pq_div_rn(amax, 448.f);
      const float rs = pq_wave_sum(pq_encode4(v, sc, a + (size_t)m * K + c0));
      if (lane == 0) asr[(size_t)m * G + g] = make_float2(sc, rs);
    }
  } else {
    const int m = pq_bid_y() * PQ_WAVES + wave;
    if (m >= M) return;  // no workgroup barrier below
    float amax = 0.f;
    for (int g = 0; g < G; ++g) {  // pass 1: the row's amax
      pq_load_rec(rr, rec, krot, K, g);
      const int c0 = g * 128 + 4 * lane;
      float v[4];
      pq_load4<BF16>(x + (size_t)m * ldx + c0, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = pq_mul_rn(v[e], cs[c0 + e]);
      pq_givens(v, xs, rr, krot);
#pragma unroll
      for (int e = 0; e < 4; ++e) amax = fmaxf(amax, fabsf(v[e]));
    }
    amax = pq_wave_max(amax);
    const float sc = pq_div_rn(amax, 448.f);
    for (int g = 0; g < G; ++g) {  // pass 2: rotate again and encode with the row scale
      pq_load_rec(rr, rec, krot, K, g);
      const int c0 = g * 128 + 4 * lane;
      float v[4];
      pq_load4<BF16>(x + (size_t)m * ldx + c0, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = pq_mul_rn(v[e], cs[c0 + e]);
      pq_givens(v, xs, rr, krot);
      const float rs = pq_wave_sum(pq_encode4(v, sc, a + (size_t)m * K + c0));
      if (lane == 0) asr[(size_t)m * G + g] = make_float2(sc, rs);
    }
  }
}

#define PQ_ROTQ_KERNEL(NAME, BF16, PTOK)                                                              \
  extern "C" __global__ void __launch_bounds__(32 * PQ_WAVES)                                        \
      NAME(const uint16_t* x, int ldx, const float* cs, const pq_rec* rec, uint8_t* a, float2* asr, \
           int M, int K, int krot) {                                                                 \
    pq_rotate_quant_body<BF16, PTOK>(x, ldx, cs, rec, a, asr, M, K, krot);                          \
  }
PQ_ROTQ_KERNEL(pq_rotate_quant_f16_group, false, false)
PQ_ROTQ_KERNEL(pq_rotate_quant_bf16_group, true, false)
PQ_ROTQ_KERNEL(pq_rotate_quant_f16_token, false, true)
PQ_ROTQ_KERNEL(pq_rotate_quant_bf16_token, true, true)

#if !defined(PQ_NO_GPU_INCLUDES)
#include "pq_launch.h"
// C ABI: device pointers + stream; returns 0 or the runtime's error code.
extern "C" int pq_rotate_quant(const void* x, int ldx, int x_is_bf16, const float* cs, const void* rec,
                               uint8_t* a, float* asr, int M, int K, int krot, int rotations,
                               int per_token, void* stream) {
  if (M <= 0) return 0;
  if (K % 128 || krot < 1 || krot > PQ_MAX_KROT || rotations < 1 || ldx % 4) return PQ_EINVAL;
  const dim3 block(32 * PQ_WAVES);
  const uint16_t* xp = (const uint16_t*)x;
  const pq_rec* rp = (const pq_rec*)rec;
  float2* ap = (float2*)asr;
  if (!per_token) {
    const dim3 grid(K / 128, (M + PQ_WAVES * PQ_TOK_PER_WAVE - 1) / (PQ_WAVES * PQ_TOK_PER_WAVE), rotations);
    if (x_is_bf16) pq_rotate_quant_bf16_group<<<grid, block, 0, (pq_stream)stream>>>(xp, ldx, cs, rp, a, ap, M, K, krot);
    else pq_rotate_quant_f16_group<<<grid, block, 0, (pq_stream)stream>>>(xp, ldx, cs, rp, a, ap, M, K, krot);
  } else {
    const dim3 grid(1, (M + PQ_WAVES - 1) / PQ_WAVES, rotations);
    if (x_is_bf16) pq_rotate_quant_bf16_token<<<grid, block, 0, (pq_stream)stream>>>(xp, ldx, cs, rp, a, ap, M, K, krot);
    else pq_rotate_quant_f16_token<<<grid, block, 0, (pq_stream)stream>>>(xp, ldx, cs, rp, a, ap, M, K, krot);
  }
  return pq_last_error();
}
#endif
