"""The `legacy` pq2 kernel: the simplest correct tiled GEMM, for every M.

Each 128-group: decode the weight bytes to -1/0/+1 int8 (one gathered load per element), one
int8 tensor-core dot with the natural-order activations, then the float epilogue. No split-K,
groups accumulated in order: the baseline the `exact` kernels are bit-identical to.
"""

from __future__ import annotations

import triton
import triton.language as tl

from radiance.kernels.triton.pq2_common import block_row, group_acc, group_off


@triton.jit(do_not_specialize=["M"])
def pq2_legacy_gemm(Q, S, W, WS, Y, M, N, K,
                    BM: tl.constexpr, BN: tl.constexpr):
    # W: the prepared weights (pq2_common.block_row), bytes
    groups = K // 128
    m = tl.program_id(1) * BM + tl.arange(0, BM)
    n = tl.program_id(0) * BN + tl.arange(0, BN)
    e = tl.arange(0, 128)
    mm, nm = m < M, n < N
    acc = tl.zeros((BM, BN), tl.float32)
    for g in range(groups):
        q = tl.load(Q + m[:, None] * K + g * 128 + e[None, :], mask=mm[:, None], other=0)
        wb = tl.load(W + group_off(g, 32) + block_row(n, groups, 32)[:, None] + e[None, :] // 4, mask=nm[:, None], other=0)
        c = (((wb.to(tl.int32) >> ((e[None, :] % 4) * 2)) & 3) - 1).to(tl.int8)
        idot = tl.dot(q, tl.trans(c), out_dtype=tl.int32)
        sa = tl.load(S + m * groups + g, mask=mm, other=0.0)
        sw = tl.load(WS + n * groups + g, mask=nm, other=0.0).to(tl.float32)
        acc = group_acc(acc, idot, 0, sa[:, None], sw[None, :])
    tl.store(Y + m[:, None] * N + n[None, :], acc.to(Y.dtype.element_ty), mask=mm[:, None] & nm[None, :])
