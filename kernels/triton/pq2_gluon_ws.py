"""The pq2 prefill kernel for sm_90, warp-specialized (path `gluon_ws`, M > 16): one loader warp
feeds a ring of shared-memory stages by TMA (activations, weight words) and cp.async (activation
scales and group sums); the consumer warpgroup unpacks the weight words into the A operand of an
asynchronous int8 wgmma and folds each group's int32 dot into fp32.

Why: `gluon_wgmma` issues its own copies, waits on three CTA barriers per group and loads the next
group's weights into registers, all from the warps that also fold; ncu found it latency-bound at
62 % of issue slots, and cutting the fold's instructions did not move it.
Here the consumer's only waits are one mbarrier per group and the wgmma itself, and the loader runs
RING - 1 groups ahead on its own warp.

Layout: the weight words of one 128-row block and group are one contiguous 4 KB run
(pq2_common.block_row), so the weights are a 2-D [blocks * G * 128, 8] int32 tensor and a program's
BN rows of group g are one TMA box; the consumer reads them from shared memory in `wgmma_layout`'
register order (lane q holds words q and q + 4), the A operand `a_group` builds from them lines up
with the quantizer's plane-ordered activation bytes, which TMA copies as they are (128-byte swizzle).
Tokens past M are zero-filled by TMA and their scales wrap (never stored). Groups in order through
`group_acc`: bit-identical to `legacy`.
"""

from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import async_copy
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, warpgroup_mma, warpgroup_mma_wait

from radiance.kernels.triton.gluon_compat import copy_to_shared, thread_barrier, tma_load

from radiance.kernels.triton.pq2_common import group_acc
from radiance.kernels.triton.pq2_gluon_common import store_tile
from radiance.kernels.triton.pq2_gluon_wgmma import a_group, wgmma_layout


@gluon.jit
def _load(q_desc, w_desc, S, T, qring, wring, sring, tring, ready, empty, t0, wrow, M, G,
          BT: gl.constexpr, RING: gl.constexpr):
    L: gl.constexpr = gl.BlockedLayout(size_per_thread=[BT // 32], threads_per_warp=[32], warps_per_cta=[1], order=[0])
    tok = (t0 + gl.arange(0, BT, layout=L)) % M
    nbytes: gl.constexpr = q_desc.block_type.nbytes + w_desc.block_type.nbytes
    for g in range(G):
        s = g % RING
        mbarrier.wait(empty.index(s), ((g // RING) & 1) ^ 1)  # a fresh barrier's phase 1 counts as done
        fence_async_shared()  # the consumer's plain reads of this stage before the copies overwrite it
        copy_to_shared(sring.index(s), S + tok * G + g)
        copy_to_shared(tring.index(s), T + tok * G + g)
        async_copy.mbarrier_arrive(ready.index(s))  # the stage completes only once these landed too
        mbarrier.expect(ready.index(s), nbytes)
        tma_load(q_desc, [t0, g * 128], ready.index(s), qring.index(s))
        tma_load(w_desc, [wrow + g * 128, 0], ready.index(s), wring.index(s))


@gluon.jit
def _fold(qring, wring, sring, tring, ready, empty, WS, n0, N, G, BN: gl.constexpr, BT: gl.constexpr,
          WARPS: gl.constexpr, RING: gl.constexpr, W_L: gl.constexpr):
    # group g's fold right after its wgmma: folding group g - 1 while group g's wgmma ran (a second
    # int32 dot in registers) never won on the H200: the other programs on the SM overlap it
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BT, 32])
    A_L: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
    LN: gl.constexpr = gl.SliceLayout(1, MMA)
    LT: gl.constexpr = gl.SliceLayout(0, MMA)
    rn = gl.minimum(n0 + gl.arange(0, BN, layout=LN), N - 1)
    acc = gl.zeros([BN, BT], gl.float32, layout=MMA)
    zero = gl.zeros([BN, BT], gl.int32, layout=MMA)
    sw = gl.load(WS + rn * G).to(gl.float32)
    for g in range(G):
        s = g % RING
        sw_n = gl.load(WS + rn * G + gl.minimum(g + 1, G - 1)).to(gl.float32)
        mbarrier.wait(ready.index(s), (g // RING) & 1)
        a = a_group(wring.index(s).load(W_L), BN, A_L)
        cur = warpgroup_mma(a, qring.index(s).permute([1, 0]), zero, use_acc=False, is_async=True)
        t = tring.index(s).load(LT)
        sa = sring.index(s).load(LT)
        dot = warpgroup_mma_wait(0, deps=[cur])
        thread_barrier()  # every warp of the group past its reads before the stage is handed back
        mbarrier.arrive(empty.index(s), count=1)
        acc = group_acc(acc, dot, t[None, :], sa[None, :], sw[:, None])
        sw = sw_n
    return (acc,)  # warp_specialize takes the default partition's results as a tuple


@gluon.jit(do_not_specialize=["M"])
def pq2_ws(q_desc, w_desc, S, T, WS, Y, M, N, G,
           BN: gl.constexpr, BT: gl.constexpr, WARPS: gl.constexpr, RING: gl.constexpr, LOADER_REGS: gl.constexpr):
    # q_desc: plane-ordered int8 activations [M, K], box [BT, 128]; w_desc: the prepared weights as
    # [blocks * G * 128, 8] int32, box [BN, 8]; S / T: activation scales and group sums [M, G]; WS:
    # weight scales [N, G] f16
    W_L: gl.constexpr = wgmma_layout(BN, WARPS, 0)
    FLAT: gl.constexpr = gl.SwizzledSharedLayout(1, 1, 1, order=[0])
    t0 = gl.program_id(0) * BT
    n0 = gl.program_id(1) * BN
    wrow = (n0 // 128) * (G * 128) + n0 % 128

    qring = gl.allocate_shared_memory(gl.int8, [RING, BT, 128], q_desc.layout)
    wring = gl.allocate_shared_memory(gl.int32, [RING, BN, 8], w_desc.layout)
    sring = gl.allocate_shared_memory(gl.float32, [RING, BT], FLAT)
    tring = gl.allocate_shared_memory(gl.int32, [RING, BT], FLAT)
    ready = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [RING, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(RING):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)

    acc = gl.warp_specialize([
        (_fold, (qring, wring, sring, tring, ready, empty, WS, n0, N, G, BN, BT, WARPS, RING, W_L)),
        (_load, (q_desc, w_desc, S, T, qring, wring, sring, tring, ready, empty, t0, wrow, M, G, BT, RING)),
    ], [1], [LOADER_REGS])[0]
    MMA: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, BT, 32])
    store_tile(acc, Y, t0, n0, M, N, BN, BT, gl.SliceLayout(1, MMA), gl.SliceLayout(0, MMA))
