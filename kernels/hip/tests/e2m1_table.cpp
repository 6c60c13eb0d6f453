// The MXFP4 GEMM's staging conversion (pq_e2m1.h, built here as host C++): for every fold offset d
// the kernels can be handed and every e2m1 code, the e4m3 byte the WMMA operand gets. Prints
// "d code byte" lines; kernels/hip/tests/test_mxfp4_e2m1.py checks them against OCP values.
#include <cstdio>

#include "../pq_compat.h"
#include "../pq_e2m1.h"

int main() {
  for (int d = PQ_E2M1_DMIN; d <= PQ_E2M1_DMAX; ++d) {
    const uint32_t o8 = 8u * (uint32_t)(d - PQ_E2M1_DMIN);
    const uint32_t lo = pq_e2m1_table_lo(o8), hi = pq_e2m1_table_hi(o8);
    for (uint32_t c0 = 0; c0 < 16; c0 += 4) {
      const uint32_t codes = c0 | (c0 + 1) << 8 | (c0 + 2) << 16 | (c0 + 3) << 24;
      const uint32_t bytes = pq_e2m1_to_fp8(codes, lo, hi);
      for (int b = 0; b < 4; ++b) std::printf("%d %u %u\n", d, c0 + b, (bytes >> (8 * b)) & 0xFFu);
    }
  }
  std::printf("unit %d\n", PQ_E2M1_O8_UNIT);
  return 0;
}
