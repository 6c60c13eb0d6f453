"""The paroquant decode GEMM on the tensor cores in Gluon (kind `mma_gl`, M <= 16, sm_80+): weight
words unpacked straight into the registers of mma.sync m16n8k16's A operand, fed by a cp.async ring.

Why: the CUDA-core gemv issues ~4.4 instructions per weight nibble (unpack, exact subtract, FMA),
close to the issue budget the weight stream leaves. Here the MMA does the
multiply-adds; a nibble costs ~1.1 instructions of unpacking.

The layout trick: K is a reduction, so which physical channel sits at which logical k of the MMA
is free as long as both operands agree. Lane q (= lane % 4) of the A fragment holds logical
k = 16c + 8h + 2q + e of its rows; it is given the 32 channels of its own four 16-byte weight words
(word 4q + i of a column's 64-byte group record; byte t holds channel t low, t + 64 high):
c = 2i + p1, h = p0, e = which half of the pair, where pair (p1, p0) of a word is the nibbles of
bytes (p1, p1 + 2), low (p0 = 0) or high. So a thread loads 4 consecutive words per row (one
128-bit load) and makes each f16x2 register with a mask and one exact f16x2 op, no shuffles
between lanes. The prologue (paro_rotate mode F16GF) writes each group's activations in the
matching order, so the B fragment is 4 consecutive 16-byte loads per lane too. Join / permute /
reshape only relabel registers; `convert_layout(..., assert_trivial=True)` proves it at compile time.

Arithmetic: the A operand is c - 8 (exact in fp16), the B operand the F16G codes q (activations
scaled per (row, group) by a power of two S), so the MMA's fp32 group dot is sum (c - 8) q and
acc += dot * (sc * S) - (sc * d) * RS with RS = S * sum q from the prologue (paro_gemm's fold).
Split-K: gluon_schedule.finish_tile (partials, an atomic ticket, the last program sums in split
order); on a stream-K grid (STREAM) the same, with a tile's contributors in program order.

Feeding it: loads meant for the next group are moved by ptxas next to their use,
so the operands go through shared memory instead -- a ring of `stages` buffers filled by cp.async
`stages - 1` groups ahead: the weights alone at 2 stages, from 3 also the activation words, scales,
zero points and the tokens' scales / sums (the table's choice: 4 stages).
"""

import torch

from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy, mma_v2
from radiance.kernels.triton.gluon_compat import copy_to_shared, thread_barrier

from radiance.kernels.triton.gluon_schedule import (program_tile, rotated_copy, split_tile, store_tile, stream_bounds,
                                                     stream_slot, stream_tile, wait_for_producer)


@gluon.jit
def _pairs_c8(x):
    # f16x2 (c - 8) of the nibble pairs (p1, p0) = (0,0), (0,1), (1,0), (1,1) of word x: bytes
    # (p1, p1 + 2), low / high nibble. Low: (x & 0x000F000F) | 0x6400.. = 1024 + c, minus 1032.
    # High: (x & 0x00F000F0) | 0x6400.. = 1024 + 16c, times 1/16 minus 72 (exact, one rounding).
    return gl.inline_asm_elementwise(
        "{ .reg .b32 t, u, k0, k1, k2;\n"
        " mov.b32 k0, 0x64086408; mov.b32 k1, 0x2C002C00; mov.b32 k2, 0xD480D480; shr.b32 u, $4, 8;\n"
        " lop3.b32 t, $4, 0x000F000F, 0x64006400, 0xEA; sub.rn.f16x2 $0, t, k0;\n"
        " lop3.b32 t, $4, 0x00F000F0, 0x64006400, 0xEA; fma.rn.f16x2 $1, t, k1, k2;\n"
        " lop3.b32 t, u, 0x000F000F, 0x64006400, 0xEA; sub.rn.f16x2 $2, t, k0;\n"
        " lop3.b32 t, u, 0x00F000F0, 0x64006400, 0xEA; fma.rn.f16x2 $3, t, k1, k2; }",
        "=r,=r,=r,=r,r", [x], dtype=(gl.int32, gl.int32, gl.int32, gl.int32), is_pure=True, pack=1)


@gluon.jit
def _halves(x):
    # a packed f16x2 word as its (low, high) halves: register renaming, no instruction
    return gl.inline_asm_elementwise("mov.b32 {$0, $1}, $2;", "=h,=h,r", [x], dtype=(gl.float16, gl.float16),
                                     is_pure=True, pack=1)


@gluon.jit
def _a_operand(w, BN: gl.constexpr, A_L: gl.constexpr):
    # w [BN, 16] weight words of one group -> [BN, 128] fp16 c - 8 at logical k = 32i + 16p1 + 8p0 + 2q + e
    t00, t01, t10, t11 = _pairs_c8(w)
    j = gl.join(gl.join(t00, t01), gl.join(t10, t11))  # [BN, 16 (4q + i), 2 (p0), 2 (p1)]
    j = gl.permute(gl.reshape(j, [BN, 4, 4, 2, 2]), [0, 2, 4, 3, 1])  # [BN, i, p1, p0, q]
    lo, hi = _halves(gl.reshape(j, [BN, 64]))
    return gl.convert_layout(gl.reshape(gl.join(lo, hi), [BN, 128]), A_L, assert_trivial=True)


@gluon.jit
def _b_operand(u, BT: gl.constexpr, B_L: gl.constexpr):
    # u [64, BT] activation words of one group (word 16q + 4i + 2p1 + p0, the prologue's F16GF
    # order) -> [128, BT] fp16 at the same logical k as _a_operand
    lo, hi = _halves(u)
    j = gl.reshape(gl.join(lo, hi), [4, 4, 2, 2, BT, 2])  # [q, i, p1, p0, BT, e]
    j = gl.permute(j, [1, 2, 3, 0, 5, 4])  # [i, p1, p0, q, e, BT]
    return gl.convert_layout(gl.reshape(j, [128, BT]), B_L, assert_trivial=True)


@gluon.jit
def _u_rows(u2, BT: gl.constexpr, U_L: gl.constexpr):
    # [2 BT, 32] ring rows (row 2t + h, word 32h + c) -> [64, BT] words in U_L: register relabeling
    u = gl.permute(gl.reshape(u2, [BT, 64]), [1, 0])
    return gl.convert_layout(u, U_L, assert_trivial=True)


@gluon.jit
def _ring_fill(ring, ring_u, ring_sc, ring_d, ring_s, ring_rs, i, g, W, A, SC, D, S, RS, N, w_off, u_cp, u_ok, ns, nd,
               t_cp, t_ok, ALL: gl.constexpr):
    # group g's operands into stage i of the ring, as one commit group: the weights (each thread
    # the words it reads back), with ALL also the activation words, scales, zero points and the
    # tokens' scales / sums (tokens past M and rows past N zero-filled, not fetched)
    copy_to_shared(ring.index(i), W + g * N * 16 + w_off)
    if ALL:
        copy_to_shared(ring_u.index(i), A + g * 64 + u_cp, mask=u_ok)
        copy_to_shared(ring_sc.index(i), SC + g * N + ns, mask=ns < N)
        copy_to_shared(ring_d.index(i), D + g * N + nd, mask=nd < N)
        copy_to_shared(ring_s.index(i), S + t_cp + g, mask=t_ok)
        copy_to_shared(ring_rs.index(i), RS + t_cp + g, mask=t_ok)
    async_copy.commit_group()


@gluon.constexpr_function  # built inside the kernel: a layout passed as an argument cannot be serialized
def operand_layout(bn: int, warps: int, bt: int, which: int):
    """Layout `which` of: the load layouts of the weight words [bn, 16] (lane (g, q) holds words 4q..4q+3 of rows g
    and g + 8 of each m16 tile of its warp; tiles 16 * warps rows apart) and of the activation words
    [64, bt] (lane (n, q) holds words 16q..16q+15 of token n; every warp the same): the registers
    the fragments are made of; and the second as read from the activation ring's [2 bt, 32] rows."""
    wb = [[16 << i, 0] for i in range(warps.bit_length() - 1)]
    tiles = [[16 * warps << i, 0] for i in range((bn // (16 * warps)).bit_length() - 1)]
    w_l = gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [8, 0]] + tiles,
                                     lane_bases=[[0, 4], [0, 8], [1, 0], [2, 0], [4, 0]],
                                     warp_bases=wb, block_bases=[], shape=[bn, 16])
    u_l = gl.DistributedLinearLayout(reg_bases=[[1, 0], [2, 0], [4, 0], [8, 0]] + ([[0, 8]] if bt == 16 else []),
                                     lane_bases=[[16, 0], [32, 0], [0, 1], [0, 2], [0, 4]],
                                     warp_bases=[[0, 0]] * len(wb), block_bases=[], shape=[64, bt])
    # u_l read from the activation ring's rows [2 bt, 32] (row 2t + h holds words 32h..32h + 31)
    u2_l = gl.DistributedLinearLayout(reg_bases=[[0, 1], [0, 2], [0, 4], [0, 8]] + ([[16, 0]] if bt == 16 else []),
                                      lane_bases=[[0, 16], [1, 0], [2, 0], [4, 0], [8, 0]],
                                      warp_bases=[[0, 0]] * len(wb), block_bases=[], shape=[2 * bt, 32])
    return (w_l, u_l, u2_l)[which]


@gluon.jit
def _tile_acc(A, S, RS, W, SC, D, M, N, K, G, t0, n0, prt, g0, g1, ring, ring_u, ring_sc, ring_d, ring_s, ring_rs,
              BN: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr, W_L: gl.constexpr, U_L: gl.constexpr,
              U2_L: gl.constexpr, RING: gl.constexpr, ALL: gl.constexpr):
    # the [BN, BT] fp32 sums of groups g0..g1 - 1 for the output tile at (weight row n0, token t0),
    # the activations of rotated copy prt
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, 8])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    B_L: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=MMA, k_width=2)
    LN: gl.constexpr = gl.SliceLayout(1, MMA)  # [BN] per weight row
    LT: gl.constexpr = gl.SliceLayout(0, MMA)  # [BT] per token
    # indices clamped into the tensors instead of masked (rows past N / tokens past M are never stored)
    rw = gl.minimum(n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, W_L)), N - 1)
    w_off = rw[:, None] * 16 + gl.arange(0, 16, layout=gl.SliceLayout(0, W_L))[None, :]
    tu = gl.minimum(t0 + gl.arange(0, BT, layout=gl.SliceLayout(0, U_L)), M - 1)
    u_off = (prt * M + tu)[None, :] * (K // 2) + gl.arange(0, 64, layout=gl.SliceLayout(1, U_L))[:, None]
    rn = gl.minimum(n0 + gl.arange(0, BN, layout=LN), N - 1)
    tt = gl.minimum(t0 + gl.arange(0, BT, layout=LT), M - 1)
    st_off = (prt * M + tt) * G

    acc = gl.zeros([BN, BT], gl.float32, layout=MMA)
    if ALL:  # the activations, scales and zero points through the ring too (copied cooperatively)
        CS: gl.constexpr = gl.BlockedLayout([8], [32], [WARPS], [0])  # [BN] fp16 scales, 16 bytes each
        CD: gl.constexpr = gl.BlockedLayout([16], [32], [WARPS], [0])  # [BN] int8 zero points
        CT: gl.constexpr = gl.BlockedLayout([1], [32], [WARPS], [0])  # [BT] fp32 scales / sums
        # tokens past M are not fetched (zero-filled; their columns are never stored): at M = 1 a
        # step copies one token's 256 bytes, not BT of them
        # the activation ring holds each token's 64 words as two 128-byte rows (row 2t + h: words
        # 32h..32h + 31), copied 16 bytes per thread, 8 threads per row
        CU: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [WARPS, 1], [1, 0])  # [2 BT, 32]
        rows = gl.arange(0, 2 * BT, layout=gl.SliceLayout(1, CU))
        tc = t0 + rows // 2
        u_cp = ((prt * M + gl.minimum(tc, M - 1)) * (K // 2) + 32 * (rows % 2))[:, None] \
            + gl.arange(0, 32, layout=gl.SliceLayout(0, CU))[None, :]
        u_ok = (tc < M)[:, None]
        ns = n0 + gl.arange(0, BN, layout=CS)
        nd = n0 + gl.arange(0, BN, layout=CD)
        tt_cp = t0 + gl.arange(0, BT, layout=CT)
        t_cp = (prt * M + gl.minimum(tt_cp, M - 1)) * G
        t_ok = tt_cp < M
    else:  # placeholders: _ring_fill touches them only with ALL
        u_cp, u_ok, ns, nd, t_cp, t_ok = 0, 0, 0, 0, 0, 0
    if RING > 0:
        for i in gl.static_range(RING - 1):  # clamped: a copy past the range reloads the last group
            _ring_fill(ring, ring_u, ring_sc, ring_d, ring_s, ring_rs, i, gl.minimum(g0 + i, g1 - 1), W, A, SC, D, S,
                       RS, N, w_off, u_cp, u_ok, ns, nd, t_cp, t_ok, ALL)
    else:
        w = gl.load(W + g0 * N * 16 + w_off)  # the next group's weights and activations load ahead
    if not ALL:
        u = gl.load(A + g0 * 64 + u_off)
    for g in range(g0, g1):
        gn = gl.minimum(g + 1, g1 - 1)  # the next group (register prefetch and activations outside the ring)
        if RING > 0:
            async_copy.wait_group(RING - 2)
            it = g - g0
            w = ring.index(it % RING).load(W_L)
            if ALL:
                u = _u_rows(ring_u.index(it % RING).load(U2_L), BT, U_L)
                sc = ring_sc.index(it % RING).load(LN).to(gl.float32)
                nzs = sc * -ring_d.index(it % RING).load(LN).to(gl.float32)
                s = ring_s.index(it % RING).load(LT)
                sr = ring_rs.index(it % RING).load(LT)
            # into the stage read one step ago
            _ring_fill(ring, ring_u, ring_sc, ring_d, ring_s, ring_rs, (it + RING - 1) % RING, gl.minimum(g + RING - 1, g1 - 1),
                       W, A, SC, D, S, RS, N, w_off, u_cp, u_ok, ns, nd, t_cp, t_ok, ALL)
        if RING == 0:
            w_nxt = gl.load(W + gn * N * 16 + w_off)
        if not ALL:
            u_nxt = gl.load(A + gn * 64 + u_off)
        dot = mma_v2(_a_operand(w, BN, A_L), _b_operand(u, BT, B_L), gl.zeros([BN, BT], gl.float32, layout=MMA))
        if not ALL:
            sc = gl.load(SC + g * N + rn).to(gl.float32)
            nzs = sc * -gl.load(D + g * N + rn).to(gl.float32)
            s = gl.load(S + st_off + g)
            sr = gl.load(RS + st_off + g)
        acc = gl.fma(dot, sc[:, None] * s[None, :], gl.fma(nzs[:, None], sr[None, :], acc))
        if RING == 0:
            w = w_nxt
        if not ALL:
            u = u_nxt
    if RING > 0:  # the clamped copies past the range still land: done before the ring is reused
        async_copy.wait_group(0)
    return acc


@gluon.jit
def paro_mma_gl(A, S, RS, W, SC, D, Y, BIAS, PART, CNT, M, N, K, G, pb1, pb2, gps, SPLIT,
                BN: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr,
                RING: gl.constexpr, ALL: gl.constexpr, HAS_BIAS: gl.constexpr, STREAM: gl.constexpr,
                PDL: gl.constexpr = False):
    # A: the F16GF activations as int32 words [P, M, K / 2]; W: the weight words [G, N, 16];
    # BN = 16 * WARPS * (m16 row tiles per warp), BT = 8 or 16 tokens.
    # RING = 0: the next group's weights load into registers ahead of this group's arithmetic --
    # but ptxas sinks those loads to the end of the loop body (short live ranges), so each step
    # starts by waiting a whole DRAM round trip (ncu). RING >= 2: the weights
    # stream through a cp.async ring of RING shared-memory stages, RING - 1 groups ahead (each
    # thread reads back only the 16-byte words it copied). ALL: the activation words, scales,
    # zero points and the tokens' scales / sums ride in the same ring (copied cooperatively, so
    # Triton's barriers order them); their register loads were the next wait (M = 8: -12 to -15 %).
    # STREAM: the grid is (1, 1, programs), a few per SM, and program p takes the p-th equal share
    # of all (output tile, group) steps in tile-major order -- parts of one or more tiles; a tile's
    # contributors finish it through the split-K partials in program order (stream-K). Equal tiles
    # x splits leave a wave partly empty (ncu: 544 programs on 396 slots on gate_up at M = 16).
    # PDL: launched dependent on the prologue (kernels/pdl.py), which it waits for first.
    if PDL:
        wait_for_producer()
    W_L: gl.constexpr = operand_layout(BN, WARPS, BT, 0)
    U_L: gl.constexpr = operand_layout(BN, WARPS, BT, 1)
    U2_L: gl.constexpr = operand_layout(BN, WARPS, BT, 2)
    L1: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    if ALL:
        # 16-byte chunks XOR-swizzled by row: a quarter-warp's reads (lanes q = 0..3: words 16q + 4r,
        # tokens t, t + 1) hit eight bank quads; unswizzled 256-byte token rows put q = 0, 2 and
        # both tokens on the same four banks (4-way)
        ring_u = gl.allocate_shared_memory(gl.int32, [RING, 2 * BT, 32], gl.SwizzledSharedLayout(4, 1, 8, order=[1, 0]))
        ring_sc = gl.allocate_shared_memory(SC.dtype.element_ty, [RING, BN], L1)
        ring_d = gl.allocate_shared_memory(D.dtype.element_ty, [RING, BN], L1)
        ring_s = gl.allocate_shared_memory(gl.float32, [RING, BT], L1)
        ring_rs = gl.allocate_shared_memory(gl.float32, [RING, BT], L1)
    else:
        ring_u, ring_sc, ring_d, ring_s, ring_rs = 0, 0, 0, 0, 0
    if RING > 0:
        ring = gl.allocate_shared_memory(gl.int32, [RING, BN, 16], gl.SwizzledSharedLayout(1, 1, 1, order=[1, 0]))
    else:
        ring = 0
    if STREAM:
        n_tb, work, progs, p, start, end = stream_bounds(M, N, G, BT, BN)
        while start < end:
            t, t0, n0, g0, g1 = stream_tile(start, end, G, n_tb, BT, BN)
            prt = rotated_copy(n0, pb1, pb2)
            thread_barrier()  # the last tile's ring reads are done before this tile's copies land
            acc = _tile_acc(A, S, RS, W, SC, D, M, N, K, G, t0, n0, prt, g0, g1, ring, ring_u, ring_sc, ring_d, ring_s,
                            ring_rs, BN, BT, WARPS, W_L, U_L, U2_L, RING, ALL)
            slot, count = stream_slot(t, G, work, progs, p)
            store_tile(acc, Y, BIAS, PART, CNT, M, N, t0, n0, slot, count, t, BN, BT, WARPS, HAS_BIAS)
            start = (t + 1) * G
    else:
        t0, n0, pid_k, prt, g0, g1 = program_tile(pb1, pb2, gps, G, BT, BN)
        acc = _tile_acc(A, S, RS, W, SC, D, M, N, K, G, t0, n0, prt, g0, g1, ring, ring_u, ring_sc, ring_d, ring_s,
                        ring_rs, BN, BT, WARPS, W_L, U_L, U2_L, RING, ALL)
        store_tile(acc, Y, BIAS, PART, CNT, M, N, t0, n0, pid_k, SPLIT, split_tile(), BN, BT, WARPS, HAS_BIAS)


def launch(grid, args, *, bm: int, bn: int, num_warps: int, num_stages: int, has_bias: bool, maxnreg: int = 0,
           stream: bool = False, pdl: bool = False):
    """paro_gemm.gemm's launch of the kind `mma_gl` (args: its common argument tuple, the weights
    as int32 words). stages 1: the weights one group ahead in registers; 2: the weights through a
    2-stage cp.async ring; 3+: a ring of that many stages carrying the activations, scales and zero
    points too (where N is a multiple of 16: cp.async moves 4 bytes or more, and an fp16 scale row
    of another N starts off 16-byte alignment; else the weights only). maxnreg > 0 caps the registers
    per thread (the 16-token tile takes 142 uncapped, 3 programs per SM; capped at 128 it fits 4
    without spills, and measured no faster on the H200). stream: grid is (1, 1,
    programs) of a stream-K launch (split_finish.stream_programs), not tiles x splits. pdl: launched
    dependent on the kernel before it (kernels/pdl.py; sm_90+)."""
    tiles = bn // (16 * num_warps)  # m16 row tiles per warp
    if bm not in (8, 16) or bn % (16 * num_warps) or tiles & (tiles - 1):
        raise ValueError(f"paroquant mma_gl: bm (tokens) must be 8 or 16 and BN={bn} a power-of-two "
                         f"multiple of 16 x {num_warps} warps")
    a, *rest = args
    paro_mma_gl[grid](a.view(torch.int32), *rest, BN=bn, BT=bm, WARPS=num_warps,
                      RING=num_stages if num_stages > 1 else 0, ALL=num_stages > 2 and args[11] % 16 == 0,
                      HAS_BIAS=has_bias, STREAM=stream, PDL=pdl, num_warps=num_warps, launch_pdl=pdl,
                      **({"maxnreg": maxnreg} if maxnreg else {}))
    return args[6]
