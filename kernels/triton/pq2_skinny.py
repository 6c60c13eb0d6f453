"""Skinny split-K GEMM for small unquantized projections (y = x W^T, bf16/fp16, M <= 16).

cuBLAS picks a handful of thread blocks for shapes like N = 96, K = 5120 at M = 2..16 and
moves data at a few percent of bandwidth. Here one program owns an (N tile, K split); the fp32
partials are summed in split order by `reduce_splits` (deterministic), rounded once.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit(do_not_specialize=["M"])
def skinny_splitk_gemm(X, W, P, M, N, K, stride_xm,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, KSPLIT: tl.constexpr):
    # KSPLIT: K elements per split (a multiple of BK); grid (cdiv(N, BN), cdiv(K, KSPLIT))
    pn, pk = tl.program_id(0), tl.program_id(1)
    m = tl.arange(0, BM)
    n = pn * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in tl.static_range(0, KSPLIT, BK):
        k = pk * KSPLIT + k0 + tl.arange(0, BK)
        km = k < K
        x = tl.load(X + m[:, None] * stride_xm + k[None, :], mask=(m[:, None] < M) & km[None, :], other=0.0)
        w = tl.load(W + n[:, None] * K + k[None, :], mask=(n[:, None] < N) & km[None, :], other=0.0)
        acc = tl.dot(x, tl.trans(w), acc, out_dtype=tl.float32)
    tl.store(P + pk * M * N + m[:, None] * N + n[None, :], acc, mask=(m[:, None] < M) & (n[None, :] < N))
