"""The pq2 tensor-core kernel in plain Triton (`tl.dot`), for small batches and prefill.

Per 128-group, four masked-plane int8 dots of K = 32: plane s of the weight bytes,
(w >> 2s) & 3 as int8 [BN, 32], times the plane-ordered activations [32, BT] of that plane.
Their int32 sum minus the group sum of q is the exact ternary dot; the float epilogue is
`group_acc`, groups in order. Weight rows are the MMA's M side and tokens its N side, so a
16-token tile wastes nothing at M = 16.

SPLITS > 1 splits the groups over the grid's third axis: each split writes fp32 partials that
`reduce_splits` sums in split order (deterministic, but not bit-identical to SPLITS = 1).
"""

from __future__ import annotations

import triton
import triton.language as tl

from radiance.kernels.triton.pq2_common import block_row, group_acc, group_off, plane


@triton.jit(do_not_specialize=["M"])
def pq2_planes_gemm(Q, S, T, W, WS, Y, P, M, N, K,
                    BN: tl.constexpr, BT: tl.constexpr, SPLITS: tl.constexpr, STAGES: tl.constexpr,
                    ONE_DOT: tl.constexpr, ASM: tl.constexpr, EVEN_N: tl.constexpr):
    # W: the prepared weights (pq2_common.block_row), bytes
    groups = K // 128
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    m = tl.program_id(1) * BT + tl.arange(0, BT)
    z = tl.program_id(2)
    b = tl.arange(0, 32)
    e = tl.arange(0, 128)
    nm, mm = n < N, m < M
    per = tl.cdiv(groups, SPLITS)
    g0 = z * per
    g1 = tl.minimum(groups, g0 + per)
    acc = tl.zeros((BN, BT), tl.float32)
    wrow = W + block_row(n, groups, 32)[:, None] + b[None, :]
    qcol = Q + m[None, :] * K + b[:, None]
    for g in tl.range(g0, g1, num_stages=STAGES):
        if EVEN_N:  # N % BN == 0: no row masks on the weight stream (they cost ~10% of the loop)
            w = tl.load(wrow + group_off(g, 32))
            sw = tl.load(WS + n * groups + g).to(tl.float32)
        else:
            w = tl.load(wrow + group_off(g, 32), mask=nm[:, None], other=0)
            sw = tl.load(WS + n * groups + g, mask=nm, other=0.0).to(tl.float32)
        if ONE_DOT:
            # the four planes side by side in plane order, one K = 128 dot
            p0 = plane(w, 0, ASM)
            p1 = plane(w, 1, ASM)
            p2 = plane(w, 2, ASM)
            p3 = plane(w, 3, ASM)
            a = tl.reshape(tl.permute(tl.join(tl.join(p0, p1), tl.join(p2, p3)), (0, 3, 2, 1)), (BN, 128))
            q = tl.load(Q + m[None, :] * K + g * 128 + e[:, None], mask=mm[None, :], other=0)
            idot = tl.dot(a, q, out_dtype=tl.int32)
        else:
            idot = tl.zeros((BN, BT), tl.int32)
            for s in tl.static_range(4):
                a = plane(w, s, ASM)
                q = tl.load(qcol + g * 128 + s * 32, mask=mm[None, :], other=0)
                idot = tl.dot(a, q, idot, out_dtype=tl.int32)
        t = tl.load(T + m * groups + g, mask=mm, other=0)
        sa = tl.load(S + m * groups + g, mask=mm, other=0.0)
        acc = group_acc(acc, idot, t[None, :], sa[None, :], sw[:, None])
    out = tl.trans(acc)  # [BT, BN]: rows of Y, stored along N
    mask = mm[:, None] & nm[None, :]
    if SPLITS == 1:
        tl.store(Y + m[:, None] * N + n[None, :], out.to(Y.dtype.element_ty), mask=mask)
    else:
        tl.store(P + z * M * N + m[:, None] * N + n[None, :], out, mask=mask)
