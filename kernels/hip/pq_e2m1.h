// OCP e2m1 weight codes -> e4m3 WMMA operand bytes with the e8m0 block exponent folded in, in
// integer arithmetic (host and device give the same bytes; kernels/hip/tests/test_mxfp4_e2m1.py
// checks every code at every offset). Needs pq_compat.h (PQ_HD, pq_perm8).
#pragma once

// The folded operand is E2M1[i] * 2^d for a block offset d in [PQ_E2M1_DMIN, PQ_E2M1_DMAX]. The
// offset is stored as o8 = 8 * (d - PQ_E2M1_DMIN): adding 8 to a normal e4m3 byte doubles its
// value, so the table is the e4m3 bytes of E2M1[i] * 2^DMIN (all normal) plus o8 in every nonzero
// entry. d >= -5 keeps 0.5 * 2^d normal (>= 2^-6) and d <= 6 keeps 6 * 2^d <= 384 below the NaN code.
#define PQ_E2M1_DMIN (-5)
#define PQ_E2M1_DMAX 6
#define PQ_E2M1_O8_UNIT 40  // o8 of d = 0: the e2m1 value itself (per-block scaling)

// magnitudes 0 0.5 1 1.5 | 2 3 4 6, times 2^-5: bytes 0x00 0x08 0x10 0x14 | 0x18 0x1C 0x20 0x24
PQ_HD uint32_t pq_e2m1_table_lo(uint32_t o8) { return 0x14100800u + o8 * 0x01010100u; }
PQ_HD uint32_t pq_e2m1_table_hi(uint32_t o8) { return 0x24201C18u + o8 * 0x01010101u; }

// Four codes (0..15, one per byte: bit 3 the sign, bits 0..2 the magnitude) -> four e4m3 bytes:
// one byte permute from the lane's table, the sign moved from bit 3 to bit 7 (code 8, -0, gives
// e4m3 -0, which adds nothing).
PQ_HD uint32_t pq_e2m1_to_fp8(uint32_t codes, uint32_t table_lo, uint32_t table_hi) {
  return pq_perm8(table_hi, table_lo, codes & 0x07070707u) | ((codes & 0x08080808u) << 4);
}
