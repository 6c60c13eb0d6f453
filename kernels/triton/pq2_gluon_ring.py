"""The pq2 prefill kernel in Gluon (path `gluon_ring`, M > 16, sm_80+): int8 mma.sync m16n8k32 with
the weight bytes unpacked straight into the A-operand registers and the activations shared by the
program's warps through a cp.async ring in shared memory.

Why: the `gluon` small-band kernel keeps every token's activation words in registers, which at 32+
tokens leaves no room for the accumulators (252 registers at 32 tokens, spills at 64); Triton's
`tl.dot` path stages the decoded weights through shared memory for wgmma and waits on each group.

Per 128-group and per MMA k-step j (= weight plane j): lane q of the A fragment holds plane j of its
own two weight words 2q, 2q + 1 (pq2_gluon's layout trick); the B fragment is then 8 consecutive bytes
of the plane-ordered activations at 32j + 8q, one 8-byte shared load per token column. The ring
stores a token's 32 words with its k-step quarter XOR-ed by the token's two low bits
(`ring_layout`), so the 16 lanes of each half-warp (4 tokens x 4 q) hit 32 distinct banks.

Arithmetic: four chained k-step MMAs into one int32 dot per group, then pq2_common's `group_acc`
(groups in order: bit-identical to the other group-ordered pq2 kernels). No split-K: prefill grids
are large.
"""

from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
from radiance.kernels.triton.gluon_compat import copy_to_shared, thread_barrier

from radiance.kernels.triton.pq2_common import block_row, group_acc, group_off
from radiance.kernels.triton.pq2_gluon import operand_layout
from radiance.kernels.triton.pq2_gluon_common import code_plane, four_copies, word_bytes


@gluon.constexpr_function  # built inside the kernel: a layout passed as an argument cannot be serialized
def ring_layout(warps: int, bt: int, ring: int, which: int):
    """Layout `which` of (activation copy [bt, 32], k-step read [bt, 8], the ring's shared layout
    [ring * bt, 32] words, scale copy [bt]); the weight words [bn, 8] in registers are the
    small-band kernel's (pq2_gluon.operand_layout: lane q holds words 2q, 2q + 1)."""
    c_l = gl.BlockedLayout(size_per_thread=[1, 4], threads_per_warp=[4, 8], warps_per_cta=[warps, 1], order=[1, 0])
    r_l = gl.DistributedLinearLayout(reg_bases=[[0, 1]] + [[8 << i, 0] for i in range((bt // 8).bit_length() - 1)],
                                     lane_bases=[[0, 2], [0, 4], [1, 0], [2, 0], [4, 0]],
                                     warp_bases=[[0, 0]] * (warps.bit_length() - 1), block_bases=[], shape=[bt, 8])
    # offset bit -> (stage * bt + token, word): words 0..15 in place, the k-step bits (8, 16) flipped by
    # token bits 0 and 1, then the other token bits and the stages (stage s is rows s * bt ..)
    offs = [[0, 1 << i] for i in range(5)] + [[1, 8], [2, 16]] + [[4 << i, 0] for i in range((ring * bt // 4).bit_length() - 1)]
    smem = gl.SharedLinearLayout(offset_bases=offs)
    s_l = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[warps], order=[0])
    return (c_l, r_l, smem, s_l)[which]


@gluon.jit
def _a_plane(w, j: gl.constexpr, BN: gl.constexpr, A_L: gl.constexpr):
    # w [BN, 8] weight words -> plane j as [BN, 32] codes at logical k = 16h + 4q + b (byte 8q + 4h + b)
    p = gl.reshape(code_plane(gl.reshape(four_copies(w), [BN, 32]), j), [BN, 4, 2, 4])  # [BN, q, h, b]
    return gl.convert_layout(gl.reshape(gl.permute(p, [0, 2, 1, 3]), [BN, 32]), A_L, assert_trivial=True)


@gluon.jit
def _b_step(u, BT: gl.constexpr, B_L: gl.constexpr):
    # u [BT, 8] activation words of one k-step -> [32, BT] bytes at the same logical k as _a_plane
    u4 = word_bytes(gl.reshape(gl.permute(four_copies(u), [1, 2, 3, 0]), [32, BT]))  # byte 4 * word + b
    j = gl.permute(gl.reshape(u4, [4, 2, 4, BT]), [1, 0, 2, 3])  # [h, q, b, BT]
    return gl.convert_layout(gl.reshape(j, [32, BT]), B_L, assert_trivial=True)


@gluon.jit
def ring_offsets(M, N, K, G, BN: gl.constexpr, BT: gl.constexpr, W_L: gl.constexpr, LN: gl.constexpr,
                 C_L: gl.constexpr, S_L: gl.constexpr, QW: gl.constexpr):
    # this program's first token / row and the offsets its loads and copies start from; QW = 4: the
    # activations as int32 words (32 per group), 1: as bytes (128 per group). Indices are clamped into
    # the tensors instead of masked (rows past N / tokens past M are never stored); tokens past M wrap
    # around instead of all reading token M - 1 (one address copied by most of a tile's threads).
    t0 = gl.program_id(0) * BT
    n0 = gl.program_id(1) * BN
    rw = gl.minimum(n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, W_L)), N - 1)
    w_off = block_row(rw, G, 8)[:, None] + gl.arange(0, 8, layout=gl.SliceLayout(0, W_L))[None, :]
    rn = gl.minimum(n0 + gl.arange(0, BN, layout=LN), N - 1)
    c_tok = (t0 + gl.arange(0, BT, layout=gl.SliceLayout(1, C_L))) % M
    q_off = c_tok[:, None] * (K // QW) + gl.arange(0, 128 // QW, layout=gl.SliceLayout(0, C_L))[None, :]
    s_tok = (t0 + gl.arange(0, BT, layout=S_L)) % M
    return t0, n0, w_off, rn, q_off, s_tok


@gluon.jit
def ring_fill(ring, sbuf, tbuf, Q, S, T, q_off, s_tok, g, G, QW: gl.constexpr):
    # cp.async of group g's activations, scales and group sums into one ring stage (the group
    # clamped: a stage past the range is filled and never read)
    gc = gl.minimum(g, G - 1)
    copy_to_shared(ring, Q + gc * (128 // QW) + q_off)
    copy_to_shared(sbuf, S + s_tok * G + gc)
    copy_to_shared(tbuf, T + s_tok * G + gc)
    async_copy.commit_group()


@gluon.jit
def store_tile(acc, Y, t0, n0, M, N, BN: gl.constexpr, BT: gl.constexpr, LN: gl.constexpr, LT: gl.constexpr):
    # acc [BN rows, BT tokens] into Y [M, N]
    cols = n0 + gl.arange(0, BN, layout=LN)
    toks = t0 + gl.arange(0, BT, layout=LT)
    ymask = (cols < N)[:, None] & (toks < M)[None, :]
    gl.store(Y + toks[None, :] * N + cols[:, None], acc.to(Y.dtype.element_ty), mask=ymask)


@gluon.jit(do_not_specialize=["M"])
def pq2_mma_ring(Q, S, T, W, WS, Y, M, N, K, G,
                 BN: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr, RING: gl.constexpr):
    # Q: plane-ordered int8 activations as int32 words [M, K / 4]; S / T: their scales and group sums
    # [M, G]; W: the prepared weights as int32 words (block_row); WS: weight scales [N, G]
    W_L: gl.constexpr = operand_layout(BN, WARPS, 8, 0)
    C_L: gl.constexpr = ring_layout(WARPS, BT, RING, 0)
    R_L: gl.constexpr = ring_layout(WARPS, BT, RING, 1)
    SMEM: gl.constexpr = ring_layout(WARPS, BT, RING, 2)
    S_L: gl.constexpr = ring_layout(WARPS, BT, RING, 3)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, 8])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
    B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4)
    LN: gl.constexpr = gl.SliceLayout(1, MMA)
    LT: gl.constexpr = gl.SliceLayout(0, MMA)
    FLAT: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])  # per stage: [BT]

    t0, n0, w_off, rn, q_off, s_tok = ring_offsets(M, N, K, G, BN, BT, W_L, LN, C_L, S_L, 4)

    # stages are static slices (a linear shared layout takes no dynamic index): the loop runs RING
    # groups per step, stage s for group g0 + s
    ring = gl.allocate_shared_memory(gl.int32, [RING * BT, 32], SMEM)
    sring = gl.allocate_shared_memory(gl.float32, [RING, BT], FLAT)
    tring = gl.allocate_shared_memory(gl.int32, [RING, BT], FLAT)
    for i in gl.static_range(RING - 1):
        ring_fill(ring.slice(i * BT, BT), sring.index(i), tring.index(i), Q, S, T, q_off, s_tok, i, G, 4)
    w = gl.load(W + w_off)
    sw = gl.load(WS + rn * G).to(gl.float32)
    acc = gl.zeros([BN, BT], gl.float32, layout=MMA)
    for g0 in range(0, G, RING):
        for s in gl.static_range(RING):
            g = g0 + s
            if g < G:  # uniform: the last step when RING does not divide G
                # the next group's weights in registers; the stage read one group ago is refilled once
                # every warp is past it (the barrier) and this thread's copies of group g have landed
                w_n = gl.load(W + group_off(gl.minimum(g + 1, G - 1), 8) + w_off)
                sw_n = gl.load(WS + rn * G + gl.minimum(g + 1, G - 1)).to(gl.float32)
                async_copy.wait_group(RING - 2)
                thread_barrier()
                st: gl.constexpr = (s + RING - 1) % RING
                ring_fill(ring.slice(st * BT, BT), sring.index(st), tring.index(st), Q, S, T, q_off, s_tok, g + RING - 1, G, 4)
                cur = ring.slice(s * BT, BT)
                dot = gl.zeros([BN, BT], gl.int32, layout=MMA)
                for j in gl.static_range(4):
                    u = cur.slice(8 * j, 8, dim=1).load(R_L)
                    dot = mma_v2(_a_plane(w, j, BN, A_L), _b_step(u, BT, B_L), dot)
                t = tring.index(s).load(LT)
                sa = sring.index(s).load(LT)
                acc = group_acc(acc, dot, t[None, :], sa[None, :], sw[:, None])
                w = w_n
                sw = sw_n
    async_copy.wait_group(0)  # the clamped copies past the range still write: done before the smem is released

    store_tile(acc, Y, t0, n0, M, N, BN, BT, LN, LT)
