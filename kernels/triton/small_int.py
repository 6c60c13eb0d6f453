"""Exact int32 -> fp32 for the small integers a 128-group's int8 dot produces.

The int8 GEMMs turn every output's int32 group dot into fp32 once per group. `I2F`/`I2FP` issue
at 1/8 of the FP32 rate on sm_80/86/90 (16 per clock per SM; paro_gemm's `_nibble_f16` avoids them
for the same reason); here they measured as no bound (pq2 prefill unchanged), and
the shipped one-dot tiles were timed with this form. The exponent trick does it with one integer
add and one float add: for |v| < 2^22, the bits 0x4B400000 + v read as an fp32 are exactly
1.5 * 2^23 + v (v lands in the mantissa), and subtracting 1.5 * 2^23 leaves v. A group dot is at
most 2 * 127 * 128 (pq2) or 8 * 127 * 128 (paroquant W4A8) in magnitude, far inside the range.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def small_int_f32(v, sub):
    # fp32 of (v - sub), exact for |v - sub| < 2^22; `sub` (0 or a small vector broadcast along v)
    # is folded into the magic constant, so a broadcast subtraction costs nothing per element
    return (v + (0x4B400000 - sub)).to(tl.float32, bitcast=True) - 12582912.0
