// OCP fp8 e4m3 ("e4m3fn": no infinities, 0x7F/0xFF NaN, max 448) encode and decode, in integer
// arithmetic so host and device give the same bytes whatever their denormal mode.
// Included by pq_compat.h (needs PQ_HD, pq_f32_bits, pq_bits_f32, pq_perm8).
#pragma once

// Round to nearest even, saturating to +-448; NaN -> 0 and -0 -> +0 (a code the GEMM can take
// without special cases). Checked against an independent encoder over all 2^32 float bit patterns
// (kernels/hip/tests/e4m3_exhaustive.cpp).
PQ_HD uint8_t pq_e4m3_encode(float x) {
  const uint32_t u = pq_f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0;                                  // NaN
  if (a >= 0x43e00000u) return (uint8_t)(sign | 0x7eu);           // |x| >= 448 (inf too): saturate
  const int e = (int)(a >> 23) - 127;                              // unbiased f32 exponent
  uint32_t q;
  if (e >= -6) {                                                   // e4m3 normal range
    // keep 3 mantissa bits, round half to even, rebias 127 -> 7 (a carry into the exponent is right)
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    q = (r >> 20) - (120u << 3);
    if (q > 0x7eu) q = 0x7eu;                                      // cannot happen below 448; kept as a guard
  } else if (e >= -10) {                                           // subnormal: multiples of 2^-9
    const uint32_t mant = (a & 0x7fffffu) | 0x800000u;             // value = mant * 2^(e-23)
    const int shift = 14 - e;                                      // value * 2^9 = mant >> shift
    const uint32_t whole = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1);
    q = whole + ((rem > halfway || (rem == halfway && (whole & 1u))) ? 1u : 0u);
  } else {
    q = 0;                                                         // below half the smallest subnormal
  }
  return q == 0 ? (uint8_t)0 : (uint8_t)(sign | q);
}

PQ_HD float pq_e4m3_decode(uint8_t c) {
  const uint32_t sign = (uint32_t)(c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xfu, m = c & 7u;
  if (e == 0) return pq_bits_f32(sign | pq_f32_bits((float)m * 0.001953125f));  // m * 2^-9
  if (e == 15 && m == 7) return pq_bits_f32(0x7fc00000u);                    // NaN (never produced)
  return pq_bits_f32(sign | ((e + 120u) << 23) | (m << 20));
}

// Four weight codes c (0..15, one per byte) -> the four e4m3 bytes of (c - 8), by byte permutes
// from two 8-entry tables: codes 0..7 are -8..-1, codes 8..15 are 0..7 (all exact in e4m3).
PQ_HD uint32_t pq_codes_to_fp8(uint32_t codes) {
  const uint32_t sel = codes & 0x07070707u;
  const uint32_t neg = pq_perm8(0xB8C0C4C8u, 0xCACCCED0u, sel);  // -8 -7 -6 -5 | -4 -3 -2 -1
  const uint32_t pos = pq_perm8(0x4E4C4A48u, 0x44403800u, sel);  //  0  1  2  3 |  4  5  6  7
  const uint32_t hi = ((codes >> 3) & 0x01010101u) * 0xFFu;      // 0xFF in each byte with code >= 8
  return (pos & hi) | (neg & ~hi);
}
