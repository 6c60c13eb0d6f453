// Exhaustive check of the kernels' e4m3 encoder (pq_e4m3.h, built here as host C++) against an
// independent encoder derived from the OCP 8-bit floating point spec: the 127 finite positive
// e4m3fn values are enumerated from the format definition, and each float is mapped to the nearest
// one (ties to the even code, saturation at 448, NaN -> 0, -0 -> +0) by walking the floats in
// increasing order against the midpoints. Every one of the 2^32 float bit patterns is compared.
//
//   e4m3_exhaustive [threads]            exhaustive check, exit 0 iff byte-identical everywhere
//   e4m3_exhaustive --encode IN OUT      encode the float32 file IN into the byte file OUT
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "../pq_compat.h"

static double g_val[127];  // value of code c (0..126), from the spec: e = c >> 3, m = c & 7

static void spec_values() {
  for (int c = 0; c < 127; ++c) {
    const int e = c >> 3, m = c & 7;
    g_val[c] = e == 0 ? m / 512.0 : (1.0 + m / 8.0) * __builtin_ldexp(1.0, e - 7);
  }
}
static double mid(int i) { return (g_val[i] + g_val[i + 1]) / 2; }  // exact in double

// expected code for positive finite x, with idx the walking cursor (valid for nondecreasing x)
static uint8_t ref_code(double x, int& idx) {
  while (idx < 126 && x > mid(idx)) ++idx;
  if (idx < 126 && x == mid(idx)) return (uint8_t)(idx % 2 == 0 ? idx : idx + 1);
  return (uint8_t)idx;
}

static std::atomic<unsigned long long> g_bad{0};

static void check_range(uint32_t lo, uint32_t hi) {  // magnitudes [lo, hi), all finite
  int idx = 0;
  while (idx < 126 && !(pq_bits_f32(lo) <= mid(idx))) ++idx;
  unsigned long long bad = 0;
  for (uint32_t a = lo; a < hi; ++a) {
    const float x = pq_bits_f32(a);
    const uint8_t want = a == 0x7f800000u ? 0x7e : ref_code((double)x, idx);
    const uint8_t want_neg = want ? (uint8_t)(want | 0x80) : 0;
    const uint8_t got = pq_e4m3_encode(x), got_neg = pq_e4m3_encode(pq_bits_f32(a | 0x80000000u));
    if (got != want || got_neg != want_neg) {
      if (bad++ < 5)
        std::fprintf(stderr, "mismatch bits %08x: got %02x/%02x want %02x/%02x\n", a, got, got_neg, want, want_neg);
    }
  }
  g_bad += bad;
}

static int exhaustive(int threads) {
  spec_values();
  // finite magnitudes and +inf: [0, 0x7f800000]; split evenly over the threads
  const uint64_t end = 0x7f800001ull;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back(check_range, (uint32_t)(end * t / threads), (uint32_t)(end * (t + 1) / threads));
  for (auto& th : pool) th.join();
  unsigned long long bad = g_bad;
  for (uint32_t a = 0x7f800001u; a != 0x80000000u; ++a)  // NaN payloads, both signs
    if (pq_e4m3_encode(pq_bits_f32(a)) != 0 || pq_e4m3_encode(pq_bits_f32(a | 0x80000000u)) != 0) ++bad;
  for (int c = 0; c < 256; ++c) {  // decode: every finite code, both signs, bit-identical
    if ((c & 0x7f) == 0x7f) continue;
    const double want = ((c & 0x80) ? -1 : 1) * g_val[c & 0x7f];
    if ((double)pq_e4m3_decode((uint8_t)c) != want || pq_e4m3_encode(pq_e4m3_decode((uint8_t)c)) != (c == 0x80 ? 0 : c)) {
      std::fprintf(stderr, "decode mismatch code %02x\n", c);
      ++bad;
    }
  }
  for (uint32_t c = 0; c < 16; ++c)  // the GEMM's weight-code table: code c -> e4m3(c - 8), each byte lane
    for (int b = 0; b < 4; ++b) {
      const uint32_t codes = 0x0d050a03u ^ (0x01010101u * c) ^ (c << (8 * b));  // mix lanes
      const uint32_t got = pq_codes_to_fp8(codes & 0x0f0f0f0fu);
      for (int lane = 0; lane < 4; ++lane) {
        const int code = (int)((codes >> (8 * lane)) & 0xf);
        if (((got >> (8 * lane)) & 0xff) != pq_e4m3_encode((float)(code - 8))) {
          std::fprintf(stderr, "weight table mismatch code %d\n", code);
          ++bad;
        }
      }
    }
  std::printf("e4m3: %llu mismatches over 2^32 float bit patterns, 256 codes, 16 weight codes\n", bad);
  return bad == 0 ? 0 : 1;
}

static int encode_file(const char* in, const char* out) {
  FILE* f = std::fopen(in, "rb");
  if (!f) return 2;
  std::vector<float> xs;
  float x;
  while (std::fread(&x, sizeof x, 1, f) == 1) xs.push_back(x);
  std::fclose(f);
  std::vector<uint8_t> ys(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) ys[i] = pq_e4m3_encode(xs[i]);
  FILE* g = std::fopen(out, "wb");
  if (!g) return 2;
  std::fwrite(ys.data(), 1, ys.size(), g);
  std::fclose(g);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--encode") == 0) return encode_file(argv[2], argv[3]);
  return exhaustive(argc > 1 ? std::atoi(argv[1]) : 2);
}
