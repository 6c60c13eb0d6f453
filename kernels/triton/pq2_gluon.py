"""The pq2 small-batch kernel in Gluon (path `gluon`, M = 2..16, sm_80+): weight bytes loaded
straight into the A-operand registers of mma.sync m16n8k32 (int8), 8 bytes per row per lane.

Why: plain Triton's `tl.dot` stages the decoded operand through shared memory, and a naive Gluon
port (the A layout as loaded) fetched 4 bytes per instruction and was slower on every shape.

The layout trick: K is a reduction, so which weight sits at which logical k of the MMA is free as
long as both operands agree. Lane q (= lane % 4) of the A fragment holds logical
k = 32j + 16h + 4q + b (MMA j of the group, register half h, byte b); it is given plane j of its
own two consecutive weight words 2q + h (bytes 8q + 4h + b of the row's 32-byte group record): one
8-byte load per row, and each 4-code register is one shift and one AND. In the activations' plane
order (pq2_quant: weight 4B + s sits at 32s + B) those k are positions 32j + 8q + 4h + b, so the
B fragment is 4 consecutive 8-byte loads per lane, from the quantizer's existing output.
Join / permute / reshape only relabel registers; `convert_layout(..., assert_trivial=True)`
proves at compile time that nothing moves between lanes.

Arithmetic: the int32 dot of codes (0/1/2) and q per group, then pq2_common's `group_acc`
(acc + ((dot - t) * sa) * sw, the one every pq2 kernel calls). Each loop step takes GU groups,
and loads the next step's operands before its arithmetic (the bytes in flight per program:
GU x 32 bytes per row).
Split-K: gluon_schedule.finish_tile (fp32 partials, an atomic ticket, the last program sums the
splits in order: deterministic). Ampere instructions only: runs on sm_86 and, as mma.sync, on sm_90.
"""

from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
from radiance.kernels.triton.gluon_compat import copy_to_shared

from radiance.kernels.triton.gluon_schedule import (program_tile, split_tile, store_tile, stream_bounds, stream_slot,
                                                     stream_tile, wait_for_producer)
from radiance.kernels.triton.pq2_common import block_row, group_acc, group_off
from radiance.kernels.triton.pq2_gluon_common import code_plane, four_copies, word_bytes

NO_COPIES = gl.constexpr(1 << 30)  # program_tile's rotated-copy bounds: pq2 has one activation copy


@gluon.jit
def _a_operand(w, BN: gl.constexpr, A_L: gl.constexpr):
    # w [BN, 8] weight words of one group -> [BN, 128] codes at logical k = 32s + 16h + 4q + b
    w4 = gl.reshape(four_copies(w), [BN, 32])  # byte 4 * word + b = 8q + 4h + b
    j = gl.join(gl.join(code_plane(w4, 0), code_plane(w4, 1)), gl.join(code_plane(w4, 2), code_plane(w4, 3)))  # [BN, 32, s&1, s>>1]
    j = gl.permute(gl.reshape(j, [BN, 4, 2, 4, 2, 2]), [0, 5, 4, 2, 1, 3])  # [BN, s>>1, s&1, h, q, b]
    return gl.convert_layout(gl.reshape(j, [BN, 128]), A_L, assert_trivial=True)


@gluon.jit
def _b_operand(u, BT: gl.constexpr, B_L: gl.constexpr):
    # u [32, BT] words of plane-ordered activations (byte position 32j + 8q + 4h + b) -> [128, BT]
    # at the same logical k as _a_operand
    u4 = word_bytes(gl.reshape(gl.permute(four_copies(u), [0, 2, 3, 1]), [128, BT]))
    j = gl.permute(gl.reshape(u4, [4, 4, 2, 4, BT]), [0, 2, 1, 3, 4])  # [j, h, q, b, BT]
    return gl.convert_layout(gl.reshape(j, [128, BT]), B_L, assert_trivial=True)


@gluon.constexpr_function  # built inside the kernel: a layout passed as an argument cannot be serialized
def operand_layout(bn: int, warps: int, bt: int, which: int):
    """Layout `which` of: the load layouts of the weight words [bn, 8] (lane (g, q) holds words 2q, 2q + 1 of rows g and
    g + 8 of each m16 tile of its warp; tiles 16 * warps rows apart) and of the activation words
    [32, bt] (lane (n, q) holds words 8j + 2q, 8j + 2q + 1 of token n; every warp the same)."""
    wb = [[16 << i, 0] for i in range(warps.bit_length() - 1)]
    tiles = [[16 * warps << i, 0] for i in range((bn // (16 * warps)).bit_length() - 1)]
    w_l = gl.DistributedLinearLayout(reg_bases=[[0, 1], [8, 0]] + tiles,
                                     lane_bases=[[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]],
                                     warp_bases=wb, block_bases=[], shape=[bn, 8])
    u_l = gl.DistributedLinearLayout(reg_bases=[[1, 0], [8, 0], [16, 0]] + ([[0, 8]] if bt == 16 else []),
                                     lane_bases=[[2, 0], [4, 0], [0, 1], [0, 2], [0, 4]],
                                     warp_bases=[[0, 0]] * len(wb), block_bases=[], shape=[32, bt])
    return (w_l, u_l)[which]


@gluon.jit
def _step_loads(Q, S, T, W, WS, g, g1, w_off, u_off, rn, tt, G, GU: gl.constexpr, WEIGHTS: gl.constexpr):
    # the operands of groups g .. g + GU - 1, each index clamped into the program's range (loads
    # past it are never used); WEIGHTS = 0: all but the weights (they come through the ring)
    ops = ()
    for u in gl.static_range(GU):
        gu = gl.minimum(g + u, g1 - 1)
        if WEIGHTS:
            w = gl.load(W + group_off(gu, 8) + w_off)
        else:
            w = 0
        ops = ops + ((w, gl.load(Q + gu * 32 + u_off), gl.load(WS + rn * G + gu).to(gl.float32),
                      gl.load(T + tt * G + gu), gl.load(S + tt * G + gu)),)
    return ops


@gluon.jit
def _tile_acc(Q, S, T, W, WS, M, N, K, G, t0, n0, g0, g1, ring, BN: gl.constexpr, BT: gl.constexpr,
              WARPS: gl.constexpr, GU: gl.constexpr, RING: gl.constexpr, W_L: gl.constexpr, U_L: gl.constexpr):
    # the [BN, BT] fp32 sums of groups g0..g1 - 1 for the output tile at (weight row n0, token t0)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, 8])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
    B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4)
    LN: gl.constexpr = gl.SliceLayout(1, MMA)  # [BN] per weight row
    LT: gl.constexpr = gl.SliceLayout(0, MMA)  # [BT] per token
    # indices clamped into the tensors instead of masked (rows past N / tokens past M are never stored)
    rw = gl.minimum(n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, W_L)), N - 1)
    w_off = block_row(rw, G, 8)[:, None] + gl.arange(0, 8, layout=gl.SliceLayout(0, W_L))[None, :]
    tu = gl.minimum(t0 + gl.arange(0, BT, layout=gl.SliceLayout(0, U_L)), M - 1)
    u_off = tu[None, :] * (K // 4) + gl.arange(0, 32, layout=gl.SliceLayout(1, U_L))[:, None]
    rn = gl.minimum(n0 + gl.arange(0, BN, layout=LN), N - 1)
    tt = gl.minimum(t0 + gl.arange(0, BT, layout=LT), M - 1)

    acc = gl.zeros([BN, BT], gl.float32, layout=MMA)
    # the next step's loads are issued before this step's arithmetic; the whole tuple is replaced
    # each step, so nothing is copied between registers (a queue shifted by one group per step
    # measured slower: register moves, fewer programs per SM)
    if RING > 0:  # each thread reads back only the words it copied: no barrier, only wait_group
        for i in gl.static_range(RING - 1):
            copy_to_shared(ring.index(i), W + group_off(gl.minimum(g0 + i, g1 - 1), 8) + w_off)
            async_copy.commit_group()
    nxt = _step_loads(Q, S, T, W, WS, g0, g1, w_off, u_off, rn, tt, G, GU, RING == 0)
    for g in range(g0, g1, GU):
        cur = nxt
        nxt = _step_loads(Q, S, T, W, WS, g + GU, g1, w_off, u_off, rn, tt, G, GU, RING == 0)
        if RING > 0:
            async_copy.wait_group(RING - 2)
            wr = ring.index((g - g0) % RING).load(W_L)
            # into the buffer read one step ago
            copy_to_shared(ring.index((g - g0 + RING - 1) % RING),
                                                   W + group_off(gl.minimum(g + RING - 1, g1 - 1), 8) + w_off)
            async_copy.commit_group()
        for i in gl.static_range(GU):
            if g + i < g1:  # uniform: the last step of a range whose length GU does not divide
                w, u, sw, t, sa = cur[i]
                if RING > 0:
                    w = wr
                dot = mma_v2(_a_operand(w, BN, A_L), _b_operand(u, BT, B_L), gl.zeros([BN, BT], gl.int32, layout=MMA))
                acc = group_acc(acc, dot, t[None, :], sa[None, :], sw[:, None])

    if RING > 0:  # the clamped copies past the range still write: done before the ring is reused
        async_copy.wait_group(0)
    return acc


@gluon.jit(do_not_specialize=["M"])
def pq2_mma_gl(Q, S, T, W, WS, Y, PART, CNT, M, N, K, G, gps, SPLIT,
               BN: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr, GU: gl.constexpr, RING: gl.constexpr,
               STREAM: gl.constexpr = False, PDL: gl.constexpr = False):
    # Q: plane-ordered int8 activations as int32 words [M, K / 4]; S / T: their scales and group
    # sums [M, G]; W: the prepared weights as int32 words (block_row); WS: weight scales [N, G].
    # BN = 16 * WARPS * (m16 row tiles per warp), BT = 8 or 16 tokens, GU groups per loop step.
    # RING > 0 (GU = 1): the weights go through a cp.async ring of RING shared-memory buffers,
    # RING - 1 groups ahead. STREAM: a stream-K grid (1, 1, programs) -- program p takes the p-th
    # equal share of all (output tile, group) steps, tile-major; a tile's contributors finish it in
    # program order (paro_mma_gluon's scheme; split_finish.stream_programs sizes it).
    # PDL: launched dependent on the quantizer (kernels/pdl.py), which it waits for first.
    if PDL:
        wait_for_producer()
    W_L: gl.constexpr = operand_layout(BN, WARPS, BT, 0)
    U_L: gl.constexpr = operand_layout(BN, WARPS, BT, 1)
    if RING > 0:
        ring = gl.allocate_shared_memory(gl.int32, [RING, BN, 8], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    else:
        ring = 0
    if STREAM:
        n_tb, work, progs, p, start, end = stream_bounds(M, N, G, BT, BN)
        while start < end:
            t, t0, n0, g0, g1 = stream_tile(start, end, G, n_tb, BT, BN)
            acc = _tile_acc(Q, S, T, W, WS, M, N, K, G, t0, n0, g0, g1, ring, BN, BT, WARPS, GU, RING, W_L, U_L)
            slot, count = stream_slot(t, G, work, progs, p)
            store_tile(acc, Y, Y, PART, CNT, M, N, t0, n0, slot, count, t, BN, BT, WARPS, False)
            start = (t + 1) * G
    else:
        t0, n0, pid_k, prt, g0, g1 = program_tile(NO_COPIES, NO_COPIES, gps, G, BT, BN)
        acc = _tile_acc(Q, S, T, W, WS, M, N, K, G, t0, n0, g0, g1, ring, BN, BT, WARPS, GU, RING, W_L, U_L)
        store_tile(acc, Y, Y, PART, CNT, M, N, t0, n0, pid_k, SPLIT, split_tile(), BN, BT, WARPS, False)
