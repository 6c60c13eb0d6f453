"""The pq2 M = 1 kernel: plane-ordered DP4A GEMV (plain Triton).

The activations come plane-ordered (pq2_quant), read as int32 words: word 32*g + 8*s + j holds
the activations of plane s for weight word j of group g. Plane s of a weight word,
(w >> 2s) & 0x03030303, is four codes 0/1/2 aligned with those four bytes: one DP4A each, no
decode. dot(codes, q) - t per group is the exact ternary dot. BC groups per step, BN rows per
program; SPLITS > 1 splits the groups (fp32 partials, fixed-order `reduce_splits`).

On an H200 this kernel is bound by instruction issue, not bandwidth, so the loop is kept lean:
a 2-D [BN, BC*8] word tile (16-byte loads), EVEN tiles (N % BN == 0, whole steps per split)
without masks, and the next step's loads issued before this step's arithmetic (register double
buffer instead of a shared-memory pipeline). SASS: ~16 instructions per weight word, of which
11 are the planes' shift/and and the four DP4As (was 27 with masks and the 3-D tile).
"""

from __future__ import annotations

import triton
import triton.language as tl

from radiance.kernels.triton.pq2_common import dp4a


@triton.jit
def _step(W32, WS, Q32, T, S, rows, base, wo, go, qo, groups, KW32, g1, N, EVEN: tl.constexpr):
    # one step's operands: weight words [BN, BC*8], weight scales [BN, BC], the four planes'
    # activation words [BC*8] each, group sums and activation scales [BC]
    wp = W32 + rows[:, None] * KW32 + base * 8 + wo[None, :]
    sp = WS + rows[:, None] * groups + base + go[None, :]
    qb = Q32 + base * 32 + qo
    if EVEN:
        return (tl.load(wp), tl.load(sp), tl.load(qb), tl.load(qb + 8), tl.load(qb + 16), tl.load(qb + 24),
                tl.load(T + base + go), tl.load(S + base + go))
    else:
        rm = rows < N
        wm = (base * 8 + wo) < g1 * 8
        gm = (base + go) < g1
        return (tl.load(wp, mask=rm[:, None] & wm[None, :], other=0),
                tl.load(sp, mask=rm[:, None] & gm[None, :], other=0.0),
                tl.load(qb, mask=wm, other=0), tl.load(qb + 8, mask=wm, other=0),
                tl.load(qb + 16, mask=wm, other=0), tl.load(qb + 24, mask=wm, other=0),
                tl.load(T + base + go, mask=gm, other=0), tl.load(S + base + go, mask=gm, other=0.0))


@triton.jit(do_not_specialize=["M"])
def pq2_gemv_dp4a(Q32, S, T, W32, WS, Y, P, M, N, K, KW32,
                  BN: tl.constexpr, BC: tl.constexpr, SPLITS: tl.constexpr,
                  STAGES: tl.constexpr, ASM: tl.constexpr, EVEN: tl.constexpr):
    # KW32 = K // 16, int32 words per weight row, passed as an int for its divisibility by 16.
    # STAGES is unused (kept for the tile table's shape); EVEN: see the module docstring.
    # grid axis 2 = token row: M > 1 re-reads the weights per row (the sm_75 path for every M,
    # where Triton has no int8 tensor-core dot; elsewhere the tensor-core kernels take M > 1)
    groups = K // 128
    rows = tl.program_id(0) * BN + tl.arange(0, BN)
    z = tl.program_id(1)
    tok = tl.program_id(2)
    Q32 += tok * (KW32 * 4)
    S += tok * groups
    T += tok * groups
    Y += tok * N
    P += tok * N
    wo = tl.arange(0, BC * 8)
    go = tl.arange(0, BC)
    qo = (wo // 8) * 32 + wo % 8
    per = tl.cdiv(tl.cdiv(groups, BC), SPLITS) * BC  # groups per split, a multiple of BC
    g0 = z * per
    g1 = tl.minimum(groups, g0 + per)
    acc = tl.zeros((BN, BC), tl.float32)
    w, ws, q0, q1, q2, q3, t, sa = _step(W32, WS, Q32, T, S, rows, g0, wo, go, qo, groups, KW32, g1, N, EVEN)
    for base in range(g0, g1, BC):
        # prefetch the next step (the last step reloads itself: no branch, no mask)
        nxt = tl.minimum(base + BC, g1 - BC) if EVEN else base + BC
        w2, ws2, r0, r1, r2, r3, t2, sa2 = _step(W32, WS, Q32, T, S, rows, nxt, wo, go, qo, groups, KW32, g1, N, EVEN)
        d = dp4a(w & 0x03030303, q0[None, :], tl.zeros((BN, BC * 8), tl.int32), ASM)
        d = dp4a((w >> 2) & 0x03030303, q1[None, :], d, ASM)
        d = dp4a((w >> 4) & 0x03030303, q2[None, :], d, ASM)
        d = dp4a((w >> 6) & 0x03030303, q3[None, :], d, ASM)
        dg = tl.sum(tl.reshape(d, (BN, BC, 8)), 2) - t[None, :]
        acc += (dg.to(tl.float32) * sa[None, :]) * ws.to(tl.float32)
        w, ws, q0, q1, q2, q3, t, sa = w2, ws2, r0, r1, r2, r3, t2, sa2
    y = tl.sum(acc, 1)
    if SPLITS == 1:
        if EVEN:
            tl.store(Y + rows, y.to(Y.dtype.element_ty))
        else:
            tl.store(Y + rows, y.to(Y.dtype.element_ty), mask=rows < N)
    else:
        tl.store(P + z * M * N + rows, y, mask=rows < N)
