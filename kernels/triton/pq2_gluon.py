"""The pq2 small-batch kernel in Gluon: weight bytes loaded straight into mma_v2 A-operand registers.

Plain Triton's tl.dot stages the decoded weight operand through shared memory; with Gluon the
layouts are explicit: the weight bytes of a 128-group are loaded in the A-operand layout of
mma.sync m16n8k32 (four consecutive k bytes per 32-bit register), each plane is two instructions
per register (shift, and; inline PTX on four packed bytes), and four K=32 MMAs with the
plane-ordered activations (B operand, loaded in its layout) give the exact int32 group dot.
The float epilogue is `group_acc`'s expression. Weight rows are the MMA's M side (BM), tokens its
N side (BT = 8 or 16). GU groups per loop step; SPLITS as in pq2_planes. Ampere instructions
only (sm_80+): runs on sm_86 and, as mma.sync, on sm_90.
"""
from triton.experimental import gluon  # noqa: I001
from triton.experimental.gluon import language as ttgl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2


@gluon.jit
def _plane(wb, s: ttgl.constexpr):
    if s == 0:
        return ttgl.inline_asm_elementwise("and.b32 $0, $1, 0x03030303;", "=r,r", [wb], dtype=ttgl.int8, is_pure=True, pack=4)
    elif s == 1:
        return ttgl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 2; and.b32 $0, t, 0x03030303; }", "=r,r", [wb],
                                           dtype=ttgl.int8, is_pure=True, pack=4)
    elif s == 2:
        return ttgl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 4; and.b32 $0, t, 0x03030303; }", "=r,r", [wb],
                                           dtype=ttgl.int8, is_pure=True, pack=4)
    else:
        return ttgl.inline_asm_elementwise("{ .reg .b32 t; shr.b32 t, $1, 6; and.b32 $0, t, 0x03030303; }", "=r,r", [wb],
                                           dtype=ttgl.int8, is_pure=True, pack=4)


@gluon.jit(do_not_specialize=["M"])
def pq2_gluon_small(Q, S, T, W, WS, Y, P, M, N, K, KW,
                    BM: ttgl.constexpr, BT: ttgl.constexpr, SPLITS: ttgl.constexpr, GU: ttgl.constexpr,
                    WARPS: ttgl.constexpr, EVEN_N: ttgl.constexpr):
    # KW = K // 4 (bytes per weight row) as an int: Triton then knows it is a multiple of 16
    MMA: ttgl.constexpr = ttgl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[WARPS, 1], instr_shape=[16, 8])
    A_L: ttgl.constexpr = ttgl.DotOperandLayout(operand_index=0, parent=MMA, k_width=4)
    B_L: ttgl.constexpr = ttgl.DotOperandLayout(operand_index=1, parent=MMA, k_width=4)
    groups = K // 128
    pid_n = ttgl.program_id(0)
    pid_m = ttgl.program_id(1)
    z = ttgl.program_id(2)
    ra = pid_n * BM + ttgl.arange(0, BM, layout=ttgl.SliceLayout(1, A_L))
    ka = ttgl.arange(0, 32, layout=ttgl.SliceLayout(0, A_L))
    kb = ttgl.arange(0, 32, layout=ttgl.SliceLayout(1, B_L))
    tb = pid_m * BT + ttgl.arange(0, BT, layout=ttgl.SliceLayout(0, B_L))
    rn = pid_n * BM + ttgl.arange(0, BM, layout=ttgl.SliceLayout(1, MMA))
    tm = pid_m * BT + ttgl.arange(0, BT, layout=ttgl.SliceLayout(0, MMA))
    wptr = W + ra[:, None] * KW + ka[None, :]
    qptr = Q + tb[None, :] * K + kb[:, None]
    qmask = (tb < M)[None, :] & (kb < 32)[:, None]
    tmask = tm < M
    per = ttgl.cdiv(ttgl.cdiv(groups, GU), SPLITS) * GU
    g0 = z * per
    g1 = ttgl.minimum(groups, g0 + per)
    acc = ttgl.zeros([BM, BT], ttgl.float32, layout=MMA)
    for base in range(g0, g1, GU):
        for u in ttgl.static_range(GU):
            g = base + u
            if g < g1:
                if EVEN_N:
                    wb = ttgl.load(wptr + g * 32)
                    sw = ttgl.load(WS + rn * groups + g).to(ttgl.float32)
                else:
                    wb = ttgl.load(wptr + g * 32, mask=(ra < N)[:, None] & (ka < 32)[None, :], other=0)
                    sw = ttgl.load(WS + rn * groups + g, mask=rn < N, other=0.0).to(ttgl.float32)
                c = ttgl.zeros([BM, BT], ttgl.int32, layout=MMA)
                for s in ttgl.static_range(4):
                    qb = ttgl.load(qptr + g * 128 + s * 32, mask=qmask, other=0)
                    c = mma_v2(_plane(wb, s), qb, c)
                t = ttgl.load(T + tm * groups + g, mask=tmask, other=0)
                sa = ttgl.load(S + tm * groups + g, mask=tmask, other=0.0)
                acc = acc + ((c - t[None, :]).to(ttgl.float32) * sa[None, :]) * sw[:, None]
    omask = tmask[None, :] & (rn < N)[:, None]
    if SPLITS == 1:
        ttgl.store(Y + tm[None, :] * N + rn[:, None], acc.to(Y.dtype.element_ty), mask=omask)
    else:
        ttgl.store(P + z * M * N + tm[None, :] * N + rn[:, None], acc, mask=omask)
