"""The pq2 prefill kernel for sm_90 in Gluon (path `gluon_wgmma`, M > 16): asynchronous int8 wgmma
with the weight codes unpacked straight into the A-operand registers, the activations through a
cp.async ring in shared memory.

Why: per 128-group every output needs an int32 -> fp32 fold (4 instructions) after its 128 int8 MACs;
on the H200 the fold of a 64 x BT tile takes about as long as its MMA. Triton's `tl.dot` waits for
each group's wgmma before the fold; here the asynchronous wgmma of one program runs on the tensor
cores while the other programs on the SM fold (folding group g - 1 during group g's MMA inside one
program, a second int32 dot in registers, lost on every shape on the H200).

Layout: lane q of the A fragment holds logical k = 32j + 16h + 4q + b of row g (+8) -- here the
bytes 4(q + 4h) + b of the row's 32-byte group record in plane j, i.e. logical k = physical position
in the activations' plane order, so the B operand is the quantizer's plane-ordered bytes as they
are (one 128-byte row per token and group, 128-byte swizzle). Groups in order through pq2_common's
`group_acc`: bit-identical to the other group-ordered pq2 kernels. sm_90 only (wgmma); the
portable prefill kernel is `planes`.
"""

from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, warpgroup_mma, warpgroup_mma_wait

from radiance.kernels.triton.gluon_compat import thread_barrier

from radiance.kernels.triton.pq2_common import group_acc, group_off
from radiance.kernels.triton.pq2_gluon_common import code_plane, four_copies, ring_fill, ring_offsets, store_tile


@gluon.constexpr_function  # built inside the kernel: a layout passed as an argument cannot be serialized
def wgmma_layout(bn: int, warps: int, which: int):
    """Layout `which` of (weight words [bn, 8]: lane (g, q) holds words q and q + 4 of rows g and g + 8; activation
    copy [bt, 128] bytes, 16 per thread; scale copy [bt])."""
    wb = [[16 << i, 0] for i in range(warps.bit_length() - 1)]
    tiles = [[16 * warps << i, 0] for i in range((bn // (16 * warps)).bit_length() - 1)]
    w_l = gl.DistributedLinearLayout(reg_bases=[[0, 4], [8, 0]] + tiles,
                                     lane_bases=[[0, 1], [0, 2], [1, 0], [2, 0], [4, 0]],
                                     warp_bases=wb, block_bases=[], shape=[bn, 8])
    c_l = gl.BlockedLayout(size_per_thread=[1, 16], threads_per_warp=[4, 8], warps_per_cta=[warps, 1], order=[1, 0])
    s_l = gl.BlockedLayout(size_per_thread=[1], threads_per_warp=[32], warps_per_cta=[warps], order=[0])
    return (w_l, c_l, s_l)[which]


@gluon.jit
def a_group(w, BN: gl.constexpr, A_L: gl.constexpr):
    # w [BN, 8] weight words -> [BN, 128] codes, plane j at logical k = 32j + (byte of the record)
    w4 = gl.reshape(four_copies(w), [BN, 32])
    j = gl.join(gl.join(code_plane(w4, 0), code_plane(w4, 1)), gl.join(code_plane(w4, 2), code_plane(w4, 3)))  # [BN, 32, j&1, j>>1]
    j = gl.permute(j, [0, 3, 2, 1])  # [BN, j>>1, j&1, byte]
    return gl.convert_layout(gl.reshape(j, [BN, 128]), A_L, assert_trivial=True)


@gluon.jit(do_not_specialize=["M"])
def pq2_wgmma(Q, S, T, W, WS, Y, M, N, K, G,
              BN: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr, RING: gl.constexpr):
    # Q: plane-ordered int8 activations [M, K]; S / T: their scales and group sums [M, G]; W: the
    # prepared weights as int32 words (block_row); WS: weight scales [N, G]. RING >= 3 stages: the
    # stage of group g - 2 is refilled at group g (its wgmma was waited for at group g - 1).
    W_L: gl.constexpr = wgmma_layout(BN, WARPS, 0)
    C_L: gl.constexpr = wgmma_layout(BN, WARPS, 1)
    S_L: gl.constexpr = wgmma_layout(BN, WARPS, 2)
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BT, 32])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
    LN: gl.constexpr = gl.SliceLayout(1, MMA)
    LT: gl.constexpr = gl.SliceLayout(0, MMA)
    B_S: gl.constexpr = gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2)
    FLAT: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])

    t0, n0, w_off, rn, q_off, s_tok = ring_offsets(M, N, K, G, BN, BT, W_L, LN, C_L, S_L, 1)

    ring = gl.allocate_shared_memory(gl.int8, [RING, BT, 128], B_S)
    sring = gl.allocate_shared_memory(gl.float32, [RING, BT], FLAT)
    tring = gl.allocate_shared_memory(gl.int32, [RING, BT], FLAT)
    for i in gl.static_range(RING - 2):
        ring_fill(ring.index(i), sring.index(i), tring.index(i), Q, S, T, q_off, s_tok, i, G, 1)

    acc = gl.zeros([BN, BT], gl.float32, layout=MMA)
    zero = gl.zeros([BN, BT], gl.int32, layout=MMA)
    w = gl.load(W + w_off)
    sw = gl.load(WS + rn * G).to(gl.float32)
    for g in range(0, G):
        w_n = gl.load(W + group_off(gl.minimum(g + 1, G - 1), 8) + w_off)
        sw_n = gl.load(WS + rn * G + gl.minimum(g + 1, G - 1)).to(gl.float32)
        # group g's copies landed (this thread's: wait_group; everyone's: the barrier), and every
        # warp is past group g - 2's wgmma, so its stage takes group g + RING - 2
        async_copy.wait_group(RING - 3)
        fence_async_shared()  # the cp.async writes (generic proxy) before the wgmma's reads (async proxy)
        thread_barrier()
        st = (g + RING - 2) % RING
        ring_fill(ring.index(st), sring.index(st), tring.index(st), Q, S, T, q_off, s_tok, g + RING - 2, G, 1)
        cur = warpgroup_mma(a_group(w, BN, A_L), ring.index(g % RING).permute([1, 0]), zero, use_acc=False,
                            is_async=True)
        p = g % RING  # fold at once: the overlap comes from the other programs on the SM
        acc = group_acc(acc, warpgroup_mma_wait(0, deps=[cur]), tring.index(p).load(LT)[None, :],
                        sring.index(p).load(LT)[None, :], sw[:, None])
        w = w_n
        sw = sw_n
    async_copy.wait_group(0)  # the clamped copies past the range still write: done before the smem is released

    store_tile(acc, Y, t0, n0, M, N, BN, BT, LN, LT)
