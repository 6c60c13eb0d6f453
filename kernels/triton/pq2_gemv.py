"""The pq2 DP4A GEMV (plain Triton): M = 1, and MR rows per program for a few rows.

The activations come plane-ordered (pq2_quant), read as int32 words: word 32*g + 8*s + j holds
the activations of plane s for weight word j of group g. Plane s of a weight word,
(w >> 2s) & 0x03030303, is four codes 0/1/2 aligned with those four bytes: one DP4A each, no
decode. dot(codes, q) - t per group is the exact ternary dot. BC groups per step, BN rows per
program, MR token rows per program (each word's planes extracted once, four DP4As per token row);
SPLITS > 1 splits the groups (fp32 partials, fixed-order `reduce_splits`).

On an H200 the loop waits on its loads (ncu: the L1 at 75 % of its throughput,
mostly activation loads; DRAM at 57 %), so it is kept lean and its loads few: EVEN tiles
(N % BN == 0, whole steps per split) without masks, and the next step's loads issued before this
step's arithmetic (register double buffer instead of a shared-memory pipeline).
The weight tile is [BN, BC, 8] words (row, group, word): with the prepared weights group-major
within 128-row blocks (pq2_common.block_row), Triton's coalescing puts a warp's lanes on 16 rows
of one group, a contiguous 512-byte run per load, and the warps across groups, so each thread
reads the activation words of one group only. (A 2-D [BN, BC*8] tile on those weights put a
warp across 8 groups of 2 rows, 16 separate 32-byte runs per load: 10-30 % slower.)
RR row sub-tiles share each thread's activation loads across RR weight words.
"""

from __future__ import annotations

import triton
import triton.language as tl

from radiance.kernels.triton.pq2_common import block_row, dp4a, group_off
from radiance.kernels.triton.small_int import small_int_f32


@triton.jit
def _weight_step(W32, WS, rows, wrow, base, gi, j, groups, g1, N, EVEN: tl.constexpr):
    # one step's weight words [BN, BC, 8] and weight scales [BN, BC]
    g = base + gi
    wp = W32 + wrow[:, None, None] + group_off(g, 8)[None, :, None] + j[None, None, :]
    sp = WS + rows[:, None] * groups + g[None, :]
    if EVEN:
        return tl.load(wp), tl.load(sp)
    else:
        gm = g < g1
        rm = rows < N
        return (tl.load(wp, mask=rm[:, None, None] & gm[None, :, None], other=0),
                tl.load(sp, mask=rm[:, None] & gm[None, :], other=0.0))


@triton.jit
def _act_step(Q32, T, S, tok, base, gi, j, groups, KW32, g1, EVEN: tl.constexpr):
    # one token row's step: the four planes' activation words [BC, 8] each, group sums and
    # activation scales [BC]. tok is clamped to a real row, so the loads need no token mask
    g = base + gi
    qb = Q32 + tok * (KW32 * 4) + g[:, None] * 32 + j[None, :]
    tg = T + tok * groups + g
    sg = S + tok * groups + g
    if EVEN:
        return tl.load(qb), tl.load(qb + 8), tl.load(qb + 16), tl.load(qb + 24), tl.load(tg), tl.load(sg)
    else:
        gm = g < g1
        return (tl.load(qb, mask=gm[:, None], other=0), tl.load(qb + 8, mask=gm[:, None], other=0),
                tl.load(qb + 16, mask=gm[:, None], other=0), tl.load(qb + 24, mask=gm[:, None], other=0),
                tl.load(tg, mask=gm, other=0), tl.load(sg, mask=gm, other=0.0))


@triton.jit
def _act_steps(Q32, T, S, tok0, M, base, gi, j, groups, KW32, g1, MR: tl.constexpr, EVEN: tl.constexpr):
    acts = ()
    for r in tl.static_range(MR):
        acts = acts + (_act_step(Q32, T, S, tl.minimum(tok0 + r, M - 1), base, gi, j, groups, KW32, g1, EVEN),)
    return acts


@triton.jit
def _weight_steps(W32, WS, row0, base, gi, j, groups, g1, N, BNI: tl.constexpr, RR: tl.constexpr, EVEN: tl.constexpr):
    # the RR row sub-tiles' weight words and scales for one step
    out = ()
    for r in tl.static_range(RR):
        rows = row0 + r * BNI + tl.arange(0, BNI)
        out = out + (_weight_step(W32, WS, rows, block_row(rows, groups, 8), base, gi, j, groups, g1, N, EVEN),)
    return out


@triton.jit(do_not_specialize=["M"])
def pq2_gemv_dp4a(Q32, S, T, W32, WS, Y, P, M, N, K, KW32,
                  BN: tl.constexpr, BC: tl.constexpr, MR: tl.constexpr, RR: tl.constexpr, SPLITS: tl.constexpr,
                  STAGES: tl.constexpr, ASM: tl.constexpr, EVEN: tl.constexpr, PDL: tl.constexpr = False):
    # KW32 = K // 16 (a quarter of an activation row's int32 words), passed as an int for its
    # divisibility by 16; W32: the prepared weights as int32 words (block_row).
    # STAGES is unused (kept for the tile table's shape); EVEN: see the module docstring.
    # grid axis 2 = blocks of MR token rows: each weight word is loaded and split into its planes
    # once for the MR rows, whose accumulators are a tuple (unrolled; a token axis on the tile
    # cost more in layout conversions than the sharing saves). M > MR re-reads the weights per block.
    # RR: the BN rows as RR sub-tiles of BN / RR rows, each in the layout of a BN / RR tile, so one
    # activation load serves RR weight words per thread. (A BN-row tile gives every thread a single
    # row -- Triton wraps the extra rows onto other lanes -- and loads four activation words per
    # weight word: ncu on gate_up showed the L1 at 75 % of its throughput, the DRAM at 57 %.)
    # PDL: launched dependent on the quantizer (kernels/pdl.py), which it waits for first.
    if PDL:
        tl.extra.cuda.gdc_wait()
    BNI: tl.constexpr = BN // RR
    groups = K // 128
    row0 = tl.program_id(0) * BN
    z = tl.program_id(1)
    tok0 = tl.program_id(2) * MR
    gi = tl.arange(0, BC)
    j = tl.arange(0, 8)
    per = tl.cdiv(tl.cdiv(groups, BC), SPLITS) * BC  # groups per split, a multiple of BC
    g0 = z * per
    g1 = tl.minimum(groups, g0 + per)
    accs = (tl.zeros((BNI, BC), tl.float32),) * (MR * RR)
    wts = _weight_steps(W32, WS, row0, g0, gi, j, groups, g1, N, BNI, RR, EVEN)
    acts = _act_steps(Q32, T, S, tok0, M, g0, gi, j, groups, KW32, g1, MR, EVEN)
    for base in range(g0, g1, BC):
        # prefetch the next step (the last step reloads itself: no branch, no mask)
        nxt = tl.minimum(base + BC, g1 - BC) if EVEN else base + BC
        wts2 = _weight_steps(W32, WS, row0, nxt, gi, j, groups, g1, N, BNI, RR, EVEN)
        acts2 = _act_steps(Q32, T, S, tok0, M, nxt, gi, j, groups, KW32, g1, MR, EVEN)
        new = ()
        for rr in tl.static_range(RR):
            w, ws = wts[rr]
            p0, p1, p2, p3 = w & 0x03030303, (w >> 2) & 0x03030303, (w >> 4) & 0x03030303, (w >> 6) & 0x03030303
            wsf = ws.to(tl.float32)
            for r in tl.static_range(MR):
                q0, q1, q2, q3, t, sa = acts[r]
                d = dp4a(p0, q0[None, :, :], tl.zeros((BNI, BC, 8), tl.int32), ASM)
                d = dp4a(p1, q1[None, :, :], d, ASM)
                d = dp4a(p2, q2[None, :, :], d, ASM)
                d = dp4a(p3, q3[None, :, :], d, ASM)
                dg = small_int_f32(tl.sum(d, 2), t[None, :])
                new = new + (accs[rr * MR + r] + (dg * sa[None, :]) * wsf,)
        accs = new
        wts, acts = wts2, acts2
    for rr in tl.static_range(RR):
        rows = row0 + rr * BNI + tl.arange(0, BNI)
        for r in tl.static_range(MR):
            y = tl.sum(accs[rr * MR + r], 1)
            tok = tok0 + r
            live = (rows * 0 + tok) < M  # a vector mask: the interpreter rejects tensor & scalar masks
            if SPLITS == 1:
                if EVEN:
                    tl.store(Y + tok * N + rows, y.to(Y.dtype.element_ty), mask=live)
                else:
                    tl.store(Y + tok * N + rows, y.to(Y.dtype.element_ty), mask=(rows < N) & live)
            else:
                tl.store(P + z * M * N + tok * N + rows, y, mask=(rows < N) & live)
