"""Activation quantization for the pq2 kernels: int8 per 128-group, the group sum, and
(optionally) the plane order the DP4A and masked-plane kernels read. The same kernel is pq2's fused
producer: its x computed from the op before the linear (residual add + RMSNorm, or silu-mul).

Numerics are `reference.quant_int8_group`'s exactly: a = amax/127 (IEEE division),
q = clamp(round_half_even(x / a), -127, 127), a = 0 -> q = 0. The group sum t = sum(q) turns
the ternary -1 into one subtraction per group: dot(codes - 1, q) = dot(codes, q) - t.

Plane order: within each 128-group, the activation of weight 4*b + s (byte b, 2-bit slot s)
goes to position 32*s + b, so plane s of a weight word, (w >> 2s) & 0x03030303, lines up with
four consecutive activation bytes (one DP4A, or one K=32 int8 MMA operand).
"""

from __future__ import annotations

import triton
import triton.language as tl

from radiance.kernels.triton.producer_math import normed, row_rinv, silu_mul

GROUP = 128


@triton.jit
def _rint(y, HW_RINT: tl.constexpr):
    # round half to even. HW_RINT: cvt.rni on the GPU; the interpreter lacks libdevice, and
    # there (|y| <= 127 < 2^22) adding and removing 1.5*2^23 rounds the same way in fp32.
    if HW_RINT:
        return tl.extra.cuda.libdevice.rint(y)
    else:
        return (y + 12582912.0) - 12582912.0


@triton.jit(do_not_specialize=["M"])
def _quant_groups(X, Q, S, T, M, K, stride_xm, R, W, RO, eps, stride_rm,
                  GB: tl.constexpr, PLANES: tl.constexpr, HW_RINT: tl.constexpr, TRIGGER: tl.constexpr,
                  SRC: tl.constexpr, HAS_RES: tl.constexpr, CHUNK: tl.constexpr, INTERPRET: tl.constexpr):
    # one program: GB groups of one row. SRC: what x is -- 0 X's rows; the fused producers: 1 the
    # residual add (R, HAS_RES; the sum written to RO) + RMSNorm (W, eps) of X's rows, each program
    # taking the row's sum of squares itself; 2 silu(gate) * up of X = [gate | up]
    if TRIGGER:  # the GEMM launched after it (programmatic dependent launch, sm_90) may start now
        tl.extra.cuda.gdc_launch_dependents()
    m = tl.program_id(1)
    groups = K // 128
    g = tl.program_id(0) * GB + tl.arange(0, GB)
    e = tl.arange(0, 128)
    gmask = g < groups
    cols = g[:, None] * 128 + e[None, :]
    at = X + m * stride_xm + cols
    if SRC == 1:
        r = row_rinv(X, R, m, stride_xm, stride_rm, K, eps, HAS_RES, CHUNK)
        z = tl.load(at, mask=gmask[:, None], other=0.0).to(tl.float32)
        if HAS_RES:
            z += tl.load(R + m * stride_rm + cols, mask=gmask[:, None], other=0.0).to(tl.float32)
            tl.store(RO + m * K + cols, z.to(RO.dtype.element_ty), mask=gmask[:, None])
        x = normed(z, r, tl.load(W + cols, mask=gmask[:, None], other=0.0), X.dtype.element_ty)
    elif SRC == 2:
        gate = tl.load(at, mask=gmask[:, None], other=0.0).to(tl.float32)
        up = tl.load(at + K, mask=gmask[:, None], other=0.0).to(tl.float32)
        x = silu_mul(gate, up, X.dtype.element_ty, INTERPRET)
    else:
        x = tl.load(at, mask=gmask[:, None], other=0.0).to(tl.float32)
    a = tl.math.div_rn(tl.max(tl.abs(x), 1), 127.0)
    safe = tl.where(a > 0, a, 1.0)
    q = _rint(tl.math.div_rn(x, safe[:, None]), HW_RINT)
    q = tl.minimum(tl.maximum(q, -127.0), 127.0).to(tl.int32)
    if PLANES:
        dst = (e % 4) * 32 + e // 4
    else:
        dst = e
    tl.store(Q + m * K + g[:, None] * 128 + dst[None, :], q.to(tl.int8), mask=gmask[:, None])
    tl.store(S + m * groups + g, a, mask=gmask)
    tl.store(T + m * groups + g, tl.sum(q, 1), mask=gmask)


def quant_grid(m: int, k: int, gb: int) -> tuple[int, int]:
    return (triton.cdiv(k // GROUP, gb), m)
