// pq_rotate_quant: channel scale + krot Givens layers per 128-group + amax + e4m3 encode +
// code-domain row sums, one launch. pq_produce: the same, its input computed on the way from the
// op before the linear (the fused producers): residual add + RMSNorm, or silu(gate) * up.
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
// Producers (SRC): the value a lane rotates is computed from the producer's inputs where the plain
// kernel loads x, with reference.add_rms_norm / silu_mul's roundings. The norm needs the row's sum
// of squares first: the wave owning a token reads the row once for it (per-group mode: every
// group's workgroup does, the row is small and L2-resident at decode). Rotation 0 writes the
// residual out, each channel once.
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

#define PQ_SRC_X 0     // x as given
#define PQ_SRC_NORM 1  // rms_norm(x [+ residual]) * weight (vLLM's rms_norm / fused_add_rms_norm)
#define PQ_SRC_SILU 2  // silu(gate) * up, x = [gate | up] rows of 2K

struct pq_src {
  const uint16_t* x;  // rows of the input (ldx elements apart)
  int ldx;
  const uint16_t* res;  // NORM: the residual added to x first, or null (ldr elements apart)
  int ldr;
  uint16_t* res_out;    // NORM with res: x + res rounded, [M, K] dense
  const uint16_t* w;    // NORM: the norm weight, x's dtype
  float eps;
  const float* rinv;  // NORM: each row's 1 / rms, from pq_rms_rinv first; null: each wave takes its row's
};

template <bool BF16>
PQ_DEV float pq_round(float v) {  // to the activation dtype and back
  return BF16 ? pq_bf2f(pq_f2bf(v)) : pq_h2f(pq_f2h(v));
}

// NORM: the fp32 sum z = x + res of 4 channels at c
template <bool BF16>
PQ_DEV void pq_sum4(const pq_src& s, int m, int c, float z[4]) {
  pq_load4<BF16>(s.x + (size_t)m * s.ldx + c, z);
  if (s.res) {
    float r[4];
    pq_load4<BF16>(s.res + (size_t)m * s.ldr + c, r);
#pragma unroll
    for (int e = 0; e < 4; ++e) z[e] = pq_add_rn(z[e], r[e]);
  }
}

// NORM: 1 / sqrt(mean(z^2) + eps) of row m, the whole wave (lanes stride the row by 4 channels)
template <bool BF16, int SRC>
PQ_DEV float pq_row_rinv(const pq_src& s, int m, int K) {
  if (SRC != PQ_SRC_NORM) return 1.f;
  float ss = 0.f;
  for (int c = 4 * pq_lane(); c < K; c += 128) {
    float z[4];
    pq_sum4<BF16>(s, m, c, z);
#pragma unroll
    for (int e = 0; e < 4; ++e) ss = fmaf(z[e], z[e], ss);
  }
  return pq_div_rn(1.f, sqrtf(pq_add_rn(pq_div_rn(pq_wave_sum(ss), (float)K), s.eps)));
}

template <bool BF16, int SRC>
PQ_DEV float pq_token_rinv(const pq_src& s, int m, int K) {
  return SRC == PQ_SRC_NORM && s.rinv ? s.rinv[m] : pq_row_rinv<BF16, SRC>(s, m, K);
}

// One wave per row: the rows' 1 / rms for the per-group producer above one row, where every
// (group, rotation) workgroup taking it again would read each row G x R times.
template <bool BF16>
PQ_DEV void pq_rms_rinv_body(const pq_src s, float* rinv, int M, int K) {
  const int m = pq_bid_x() * PQ_WAVES + (pq_tid() >> 5);
  if (m >= M) return;
  const float r = pq_row_rinv<BF16, PQ_SRC_NORM>(s, m, K);
  if (pq_lane() == 0) rinv[m] = r;
}

// The 4 input channels at c of row m, as the unfused op would have written them (rounded to the
// dtype). write_res: store the residual out of these channels.
template <bool BF16, int SRC>
PQ_DEV void pq_source4(const pq_src& s, int m, int c, int K, float rinv, bool write_res, float v[4]) {
  if (SRC == PQ_SRC_X) {
    pq_load4<BF16>(s.x + (size_t)m * s.ldx + c, v);
  } else if (SRC == PQ_SRC_SILU) {
    float g[4], u[4];
    pq_load4<BF16>(s.x + (size_t)m * s.ldx + c, g);
    pq_load4<BF16>(s.x + (size_t)m * s.ldx + K + c, u);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float silu = pq_div_rn(g[e], pq_add_rn(1.f, expf(-g[e])));
      v[e] = pq_round<BF16>(pq_mul_rn(pq_round<BF16>(silu), u[e]));
    }
  } else {
    float z[4], w[4];
    pq_sum4<BF16>(s, m, c, z);
    pq_load4<BF16>(s.w + c, w);
    uint16_t h[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      h[e] = BF16 ? pq_f2bf(z[e]) : pq_f2h(z[e]);
      v[e] = pq_round<BF16>(pq_mul_rn(pq_round<BF16>(pq_mul_rn(z[e], rinv)), w[e]));
    }
    if (write_res && s.res_out) {
      uint2 o;
      o.x = (uint32_t)h[0] | ((uint32_t)h[1] << 16);
      o.y = (uint32_t)h[2] | ((uint32_t)h[3] << 16);
      *reinterpret_cast<uint2*>(s.res_out + (size_t)m * K + c) = o;
    }
  }
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

template <bool BF16, bool PTOK, int SRC>
PQ_DEV void pq_rotate_quant_body(const pq_src src, const float* __restrict__ cs,
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
      pq_source4<BF16, SRC>(src, m, c0, K, pq_token_rinv<BF16, SRC>(src, m, K), rot == 0, v);
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
    const float rinv = pq_token_rinv<BF16, SRC>(src, m, K);
    for (int g = 0; g < G; ++g) {  // pass 1: the row's amax
      pq_load_rec(rr, rec, krot, K, g);
      const int c0 = g * 128 + 4 * lane;
      float v[4];
      pq_source4<BF16, SRC>(src, m, c0, K, rinv, rot == 0, v);
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
      pq_source4<BF16, SRC>(src, m, c0, K, rinv, false, v);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = pq_mul_rn(v[e], cs[c0 + e]);
      pq_givens(v, xs, rr, krot);
      const float rs = pq_wave_sum(pq_encode4(v, sc, a + (size_t)m * K + c0));
      if (lane == 0) asr[(size_t)m * G + g] = make_float2(sc, rs);
    }
  }
}

#define PQ_ROTQ_KERNEL(NAME, BF16, PTOK, SRC)                                                         \
  extern "C" __global__ void __launch_bounds__(32 * PQ_WAVES)                                        \
      NAME(const pq_src src, const float* cs, const pq_rec* rec, uint8_t* a, float2* asr, int M, int K,  \
           int krot) {                                                                               \
    pq_rotate_quant_body<BF16, PTOK, SRC>(src, cs, rec, a, asr, M, K, krot);                         \
  }
#define PQ_ROTQ_KERNELS(SUFFIX, SRC)                                       \
  PQ_ROTQ_KERNEL(pq_##SUFFIX##_f16_group, false, false, SRC)               \
  PQ_ROTQ_KERNEL(pq_##SUFFIX##_bf16_group, true, false, SRC)               \
  PQ_ROTQ_KERNEL(pq_##SUFFIX##_f16_token, false, true, SRC)                \
  PQ_ROTQ_KERNEL(pq_##SUFFIX##_bf16_token, true, true, SRC)
PQ_ROTQ_KERNELS(rotate_quant, PQ_SRC_X)
PQ_ROTQ_KERNELS(add_rms_rotate_quant, PQ_SRC_NORM)
PQ_ROTQ_KERNELS(silu_mul_rotate_quant, PQ_SRC_SILU)
extern "C" __global__ void __launch_bounds__(32 * PQ_WAVES) pq_rms_rinv_f16(const pq_src s, float* rinv, int M, int K) {
  pq_rms_rinv_body<false>(s, rinv, M, K);
}
extern "C" __global__ void __launch_bounds__(32 * PQ_WAVES) pq_rms_rinv_bf16(const pq_src s, float* rinv, int M, int K) {
  pq_rms_rinv_body<true>(s, rinv, M, K);
}

#if !defined(PQ_NO_GPU_INCLUDES)
#include "pq_launch.h"
#define PQ_ROTQ_LAUNCH(SUFFIX)                                                                        \
  if (bf16 && per_token) pq_##SUFFIX##_bf16_token<<<grid, block, 0, st>>>(src, cs, rp, a, ap, M, K, krot); \
  else if (bf16) pq_##SUFFIX##_bf16_group<<<grid, block, 0, st>>>(src, cs, rp, a, ap, M, K, krot);         \
  else if (per_token) pq_##SUFFIX##_f16_token<<<grid, block, 0, st>>>(src, cs, rp, a, ap, M, K, krot);     \
  else pq_##SUFFIX##_f16_group<<<grid, block, 0, st>>>(src, cs, rp, a, ap, M, K, krot);

static int pq_rotq_launch(int kind, const pq_src& src, int bf16, const float* cs, const void* rec, uint8_t* a,
                          float* asr, int M, int K, int krot, int rotations, int per_token, void* stream) {
  if (M <= 0) return 0;
  if (K % 128 || krot < 1 || krot > PQ_MAX_KROT || rotations < 1 || src.ldx % 4 || src.ldr % 4) return PQ_EINVAL;
  const dim3 block(32 * PQ_WAVES);
  const dim3 grid = per_token ? dim3(1, (M + PQ_WAVES - 1) / PQ_WAVES, rotations)
                              : dim3(K / 128, (M + PQ_WAVES * PQ_TOK_PER_WAVE - 1) / (PQ_WAVES * PQ_TOK_PER_WAVE),
                                     rotations);
  const pq_rec* rp = (const pq_rec*)rec;
  float2* ap = (float2*)asr;
  const pq_stream st = (pq_stream)stream;
  if (kind == PQ_SRC_X) {
    PQ_ROTQ_LAUNCH(rotate_quant)
  } else if (kind == PQ_SRC_NORM) {
    PQ_ROTQ_LAUNCH(add_rms_rotate_quant)
  } else if (kind == PQ_SRC_SILU) {
    PQ_ROTQ_LAUNCH(silu_mul_rotate_quant)
  } else {
    return PQ_EINVAL;
  }
  return pq_last_error();
}

// C ABI: device pointers + stream; returns 0 or the runtime's error code.
extern "C" int pq_rotate_quant(const void* x, int ldx, int x_is_bf16, const float* cs, const void* rec,
                               uint8_t* a, float* asr, int M, int K, int krot, int rotations,
                               int per_token, void* stream) {
  const pq_src src{(const uint16_t*)x, ldx, nullptr, 0, nullptr, nullptr, 0.f, nullptr};
  return pq_rotq_launch(PQ_SRC_X, src, x_is_bf16, cs, rec, a, asr, M, K, krot, rotations, per_token, stream);
}

// The fused producers: kind 1 = residual add (res may be null) + RMSNorm with w, eps, writing
// x + res to res_out (dense [M, K]) when res is given; kind 2 = silu(gate) * up of x = [gate | up].
// rinv: M floats for the norm's per-row 1 / rms, taken by a launch of its own first (null: each
// wave takes its row's inside the producer).
extern "C" int pq_produce(int kind, const void* x, int ldx, const void* res, int ldr, void* res_out,
                          const void* w, float eps, float* rinv, int x_is_bf16, const float* cs,
                          const void* rec, uint8_t* a, float* asr, int M, int K, int krot, int rotations,
                          int per_token, void* stream) {
  if (kind == PQ_SRC_NORM && (w == nullptr || (res != nullptr) != (res_out != nullptr))) return PQ_EINVAL;
  if (kind != PQ_SRC_NORM && kind != PQ_SRC_SILU) return PQ_EINVAL;
  if (M <= 0) return 0;
  if (K % 128 || ldx % 4 || (res && ldr % 4)) return PQ_EINVAL;
  pq_src src{(const uint16_t*)x, ldx, (const uint16_t*)res, res ? ldr : 0, (uint16_t*)res_out,
             (const uint16_t*)w, eps, nullptr};
  if (kind == PQ_SRC_NORM && rinv) {
    const dim3 grid((M + PQ_WAVES - 1) / PQ_WAVES), block(32 * PQ_WAVES);
    if (x_is_bf16) pq_rms_rinv_bf16<<<grid, block, 0, (pq_stream)stream>>>(src, rinv, M, K);
    else pq_rms_rinv_f16<<<grid, block, 0, (pq_stream)stream>>>(src, rinv, M, K);
    src.rinv = rinv;
  }
  return pq_rotq_launch(kind, src, x_is_bf16, cs, rec, a, asr, M, K, krot, rotations, per_token, stream);
}
#endif
