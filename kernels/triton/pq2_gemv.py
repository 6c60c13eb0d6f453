"""The pq2 M = 1 kernel: plane-ordered DP4A GEMV (plain Triton).

The activations come plane-ordered (pq2_quant), read as int32 words: word 32*g + 8*s + j holds
the activations of plane s for weight word j of group g. Plane s of a weight word,
(w >> 2s) & 0x03030303, is four codes 0/1/2 aligned with those four bytes: one DP4A each, no
decode. dot(codes, q) - t per group is the exact ternary dot. BC groups per step, BN rows per
program; SPLITS > 1 splits the groups (fp32 partials, fixed-order `reduce_splits`).
"""

from __future__ import annotations

import triton
import triton.language as tl

from radiance.kernels.triton.pq2_common import dp4a


@triton.jit
def pq2_gemv_dp4a(Q32, S, T, W32, WS, Y, P, N, K, KW32,
                  BN: tl.constexpr, BC: tl.constexpr, SPLITS: tl.constexpr,
                  STAGES: tl.constexpr, ASM: tl.constexpr):
    # KW32 = K // 16, int32 words per weight row, passed as an int for its divisibility by 16
    groups = K // 128
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    z = tl.program_id(1)
    offs = tl.arange(0, BC)
    j = tl.arange(0, 8)
    rm = rows < N
    per = tl.cdiv(tl.cdiv(groups, BC), SPLITS) * BC  # groups per split, a multiple of BC
    g0 = z * per
    g1 = tl.minimum(groups, g0 + per)
    acc = tl.zeros((BN, BC), tl.float32)
    for base in tl.range(g0, g1, BC, num_stages=STAGES):
        g = base + offs
        gm = g < g1
        w = tl.load(W32 + rows[:, None, None] * KW32 + g[None, :, None] * 8 + j[None, None, :],
                    mask=rm[:, None, None] & gm[None, :, None], other=0)
        ws = tl.load(WS + rows[:, None] * groups + g[None, :], mask=rm[:, None] & gm[None, :], other=0.0)
        qb = Q32 + g[:, None] * 32 + j[None, :]
        d = tl.zeros((BN, BC, 8), tl.int32)
        for s in tl.static_range(4):
            qs = tl.load(qb + 8 * s, mask=gm[:, None], other=0)
            d = dp4a((w >> (2 * s)) & 0x03030303, qs[None, :, :], d, ASM)
        t = tl.load(T + g, mask=gm, other=0)
        sa = tl.load(S + g, mask=gm, other=0.0)
        dot = tl.sum(d, 2) - t[None, :]
        acc += (dot.to(tl.float32) * sa[None, :]) * ws.to(tl.float32)
    y = tl.sum(acc, 1)
    if SPLITS == 1:
        tl.store(Y + rows, y.to(Y.dtype.element_ty), mask=rm)
    else:
        tl.store(P + z * N + rows, y, mask=rm)
