"""paroquant W4A16 prefill for sm_90 in Gluon (kind `wgmma`): fp16 wgmma with the int4 weights
dequantized straight into its register A operand, the activations through a cp.async ring.

Why: the scratch path dequantizes the whole weight to fp16 and runs cuBLAS -- a cost that does not
shrink with M. Fused, each weight is read as 4 bits and dequantized once per program in registers,
with no per-group fold (the scale is inside the dequantized weight). On the H200: 1.3-1.8x faster
than the scratch path at M = 65..256 on wide layers (the table's band); at M = 2048 the tensor pipe
is ~78 % busy and the scratch path stays ahead.

Layout: per k-half h of a group, lane q of the A fragment holds rows g and g + 8 at k = 2q, 2q + 1,
2q + 8, 2q + 9 of each k-step of 16: it loads words q + 8h and q + 4 + 8h of each row's 64-byte group
record (paro_gemm's [G, N, 64] bytes: byte t low nibble channel t, high nibble 64 + t); one shift and
one LOP3 turn nibbles (s, s + 16) of a word into an fp16x2 of 1024 + c. The prologue (paro_rotate
PLAINW) writes each group's activations in the k order this implies, so the B operand is a plain
[BT, 128] fp16 tile. (c - zp) is exact in fp16 and times the scale rounds once: the scratch path's
numerics.
"""

import torch

from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait
from radiance.kernels import gpu
from radiance.kernels.triton.gluon_compat import copy_to_shared, thread_barrier


@gluon.constexpr_function  # built inside the kernel: a layout passed as an argument cannot be serialized
def wgmma_layout(bn: int, warps: int, which: int):
    """Layout `which` of (half a group's weight words [bn, 8]: lane (g, q) holds words q and q + 4
    of rows g and g + 8; activation copy [bt, 128] fp16, 8 per thread)."""
    wb = [[16 << i, 0] for i in range(warps.bit_length() - 1)]
    tiles = [[16 * warps << i, 0] for i in range((bn // (16 * warps)).bit_length() - 1)]
    w_l = gl.DistributedLinearLayout(reg_bases=[[0, 4], [8, 0]] + tiles,
                                     lane_bases=[[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]],
                                     warp_bases=wb, block_bases=[], shape=[bn, 8])
    c_l = gl.BlockedLayout(size_per_thread=[1, 8], threads_per_warp=[2, 16], warps_per_cta=[warps, 1], order=[1, 0])
    return (w_l, c_l)[which]


@gluon.constexpr_function
def _deq_asm(shift):
    # nibbles at bits shift and shift + 16 of $1 -> fp16x2 1024 + c (or 0x6400), minus (1024 + zp), times sc
    mask = f"shr.b32 t, $1, {shift}; and.b32 t, t, 0x000F000F;" if shift else "and.b32 t, $1, 0x000F000F;"
    return "{ .reg .b32 t; " + mask + " or.b32 t, t, 0x64006400; sub.f16x2 t, t, $3; mul.f16x2 $0, t, $5; }"


@gluon.jit
def _deq(w2, z2, s2, S: gl.constexpr):
    # nibbles at bits S and S + 16 of each weight word -> fp16x2 (c - zp) * sc; w2 / z2 / s2 hold
    # each word, (1024 + zp) as fp16x2 and sc as fp16x2 twice (pack = 2: one asm per word)
    return gl.inline_asm_elementwise(_deq_asm(S), "=r,r,r,r,r,r,r", [w2, z2, s2], dtype=gl.float16, is_pure=True,
                                     pack=2)


@gluon.jit
def _a_half(w, z, s, BN: gl.constexpr, A_L: gl.constexpr):
    # w [BN, 8] weight words (half h of the group: words q + 4i + 8h), z / s [BN, 1] fp16x2 words
    # -> [BN, 64] fp16 at logical k = 32i + 16v + 8r + 2q + e (byte 2e + v, nibble r) of the half
    w, z = gl.broadcast(w, z)  # to w's shape and layout before join (join does not broadcast)
    w, s = gl.broadcast(w, s)
    w2 = gl.join(w, w)
    z2 = gl.join(z, z)
    s2 = gl.join(s, s)
    j = gl.join(gl.join(_deq(w2, z2, s2, 0), _deq(w2, z2, s2, 4)), gl.join(_deq(w2, z2, s2, 8), _deq(w2, z2, s2, 12)))
    j = gl.permute(gl.reshape(j, [BN, 2, 4, 2, 2, 2]), [0, 1, 5, 4, 2, 3])  # [BN, i, q, e, r, v] -> [BN, i, v, r, q, e]
    return gl.convert_layout(gl.reshape(j, [BN, 64]), A_L, assert_trivial=True)


@gluon.jit
def _fill(ring, A, a_off, g, G):
    # cp.async of group g's activations into one ring stage (the group clamped: a stage past the
    # range is filled and never read)
    copy_to_shared(ring, A + gl.minimum(g, G - 1) * 128 + a_off)
    async_copy.commit_group()


@gluon.jit
def _scales(SC, D, rn, g, N):
    # group g's (1024 + zp) and scale of rows rn as fp16x2 words (D holds zp - 8)
    z = (gl.load(D + g * N + rn).to(gl.int32) + 1032).to(gl.float16).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    s = gl.load(SC + g * N + rn).to(gl.int16, bitcast=True).to(gl.int32) & 0xFFFF
    return (z * 0x10001)[:, None], (s * 0x10001)[:, None]


@gluon.jit(do_not_specialize=["M"])
def paro_wgmma_f16(A, W, SC, D, Y, BIAS, M, N, K, G, pb1, pb2,
                   BN: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr, RING: gl.constexpr,
                   HAS_BIAS: gl.constexpr):
    # A: PLAINW fp16 activations [P, M, K]; W: weight words [G, N, 16]; SC fp16 / D int8 [G, N];
    # Y [M, N]. Merged linears: columns [pb1, pb2) read rotated copy 1, [pb2, N) copy 2 (per
    # program: boundaries are multiples of BN). Each group is two wgmmas (k halves) and one is kept
    # in flight, so a half's A registers are rewritten only after its wgmma was waited for (an
    # in-flight wgmma reads them: the previous half is carried as `a_prev` to keep them live). The
    # ring's one barrier per group sits after the wait on the previous group's second half: the
    # stage it frees is refilled there, RING - 1 groups ahead.
    W_L: gl.constexpr = wgmma_layout(BN, WARPS, 0)
    C_L: gl.constexpr = wgmma_layout(BN, WARPS, 1)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BT, 16])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=2)
    LN: gl.constexpr = gl.SliceLayout(1, MMA)
    LT: gl.constexpr = gl.SliceLayout(0, MMA)
    B_S: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=16, rank=2)

    t0 = gl.program_id(0) * BT
    n0 = gl.program_id(1) * BN
    prt = (n0 >= pb1).to(gl.int32) + (n0 >= pb2).to(gl.int32)
    rn = gl.minimum(n0 + gl.arange(0, BN, layout=gl.SliceLayout(1, W_L)), N - 1)  # clamped, never stored
    w_off = rn[:, None] * 16 + gl.arange(0, 8, layout=gl.SliceLayout(0, W_L))[None, :]
    c_tok = (t0 + gl.arange(0, BT, layout=gl.SliceLayout(1, C_L))) % M  # tokens past M wrap (never stored)
    a_off = prt * M * K + c_tok[:, None] * K + gl.arange(0, 128, layout=gl.SliceLayout(0, C_L))[None, :]

    ring = gl.allocate_shared_memory(gl.float16, [RING, BT, 128], B_S)
    for i in gl.static_range(RING - 1):
        _fill(ring.index(i), A, a_off, i, G)
    w0 = gl.load(W + w_off)
    w1 = gl.load(W + w_off + 8)
    z, s = _scales(SC, D, rn, 0, N)
    async_copy.wait_group(RING - 2)
    fence_async_shared()
    thread_barrier()
    acc = gl.zeros([BN, BT], gl.float32, layout=MMA)
    a_prev = gl.zeros([BN, 64], gl.float16, layout=A_L)  # not `a1`: a name equal before and after the body is not carried
    for g in range(0, G):
        gn = gl.minimum(g + 1, G - 1)
        w0_n = gl.load(W + gn * N * 16 + w_off)
        w1_n = gl.load(W + gn * N * 16 + w_off + 8)
        z_n, s_n = _scales(SC, D, rn, gn, N)
        b = ring.index(g % RING)
        a0 = _a_half(w0, z, s, BN, A_L)
        acc = warpgroup_mma(a0, b.slice(0, 64, dim=1).permute([1, 0]), acc, is_async=True)
        acc, a_prev = warpgroup_mma_wait(1, deps=[acc, a_prev])  # group g - 1 done: its stage is free
        # group g + 1 landed (this thread's copies: wait_group; everyone's: the barrier)
        async_copy.wait_group(RING - 3)
        fence_async_shared()  # the cp.async writes (generic proxy) before the wgmma's reads (async proxy)
        thread_barrier()
        _fill(ring.index((g + RING - 1) % RING), A, a_off, g + RING - 1, G)
        a1 = _a_half(w1, z, s, BN, A_L)
        acc = warpgroup_mma(a1, b.slice(64, 64, dim=1).permute([1, 0]), acc, is_async=True)
        acc, a0 = warpgroup_mma_wait(1, deps=[acc, a0])
        a_prev = a1
        w0 = w0_n
        w1 = w1_n
        z = z_n
        s = s_n
    acc = warpgroup_mma_wait(0, deps=[acc, a_prev])[0]
    async_copy.wait_group(0)  # the clamped copies past the range still write: done before the smem is released

    cols = n0 + gl.arange(0, BN, layout=LN)
    toks = t0 + gl.arange(0, BT, layout=LT)
    if HAS_BIAS:
        acc += gl.load(BIAS + gl.minimum(cols, N - 1)).to(gl.float32)[:, None]
    ymask = (cols < N)[:, None] & (toks < M)[None, :]
    gl.store(Y + toks[None, :] * N + cols[:, None], acc.to(Y.dtype.element_ty), mask=ymask)


def launch(grid, args, *, bm: int, bn: int, num_warps: int, num_stages: int, has_bias: bool):
    """paro_gemm.gemm's launch of the kind `wgmma` (args: its common argument tuple, the weights as
    int32 words): bm tokens x bn rows per program, num_warps 4 or 8 (warpgroups), num_stages >= 3."""
    a, _, _, wb, sc, d, y, bias, _, _, m, n, k, g, pb1, pb2, _, split = args
    if (gpu.capability(y.device) or (0, 0))[0] != 9:
        raise ValueError("paroquant wgmma: sm_90 only (wgmma); the deq / scratch kinds run elsewhere")
    if a.dtype != torch.float16 or split != 1 or num_warps not in (4, 8) or bn % (16 * num_warps) \
            or bm not in (64, 128, 256) or num_stages < 3:
        raise ValueError(f"paroquant wgmma: fp16 PLAINW activations, no split-K, 4 or 8 warps, bn a multiple of "
                         f"16 x warps, bm 64 / 128 / 256 tokens, >= 3 stages (got {a.dtype}, split {split}, "
                         f"{num_warps} warps, bn {bn}, bm {bm}, {num_stages} stages)")
    if any(b < n and b % bn for b in (pb1, pb2)):
        raise ValueError(f"paroquant wgmma: partition boundaries {pb1}, {pb2} are not multiples of bn={bn}")
    paro_wgmma_f16[grid[:2]](a, wb, sc, d, y, bias, m, n, k, g, pb1, pb2, BN=bn, BT=bm, WARPS=num_warps,
                             RING=num_stages, HAS_BIAS=has_bias, num_warps=num_warps)
    return y
