"""The paroquant prefill pieces around cuBLAS (the dequant-to-scratch path, and the fallback GEMM
below Ampere): the int4 weights dequantized to a dense fp16 scratch, and the output cast.

Numerics: OUT = ((c - 8) - d) * sc in fp32, rounded once to fp16 -- the same value the fused
kernels' dequant forms (paro_gemm's layout: Wb [G, N, 64], low nibble k = t, high k = 64 + t).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _dequant_kernel(W, SC, D, OUT, N, K, BN: tl.constexpr):
    # OUT[n, k] = ((c - 8) - d) * sc in fp16: the dequant-to-scratch path (cuBLAS below Ampere)
    g = tl.program_id(0)
    offs_n = tl.program_id(1) * BN + tl.arange(0, BN)
    offs_t = tl.arange(0, 64)
    nmask = offs_n < N
    w = tl.load(W + (g * N + offs_n[:, None]) * 64 + offs_t[None, :], mask=nmask[:, None], other=0)
    sc = tl.load(SC + g * N + offs_n, mask=nmask, other=0.0).to(tl.float32)
    d = tl.load(D + g * N + offs_n, mask=nmask, other=0).to(tl.float32)
    lo = (((w & 15).to(tl.float32) - 8.0) - d[:, None]) * sc[:, None]
    hi = (((w >> 4).to(tl.float32) - 8.0) - d[:, None]) * sc[:, None]
    base = OUT + offs_n[:, None] * K + g * 128 + offs_t[None, :]
    tl.store(base, lo.to(tl.float16), mask=nmask[:, None])
    tl.store(base + 64, hi.to(tl.float16), mask=nmask[:, None])


def dequant(wb, sc, d, out: torch.Tensor) -> torch.Tensor:
    """Wb/SC/D -> dense fp16 W [N, K] written into `out` (a preallocated scratch view)."""
    g, n, _ = wb.shape
    bn = 64
    _dequant_kernel[(g, triton.cdiv(n, bn))](wb, sc, d, out, n, g * 128, BN=bn, num_warps=4)
    return out


@triton.jit
def _cast_kernel(X, Y, n, BLOCK: tl.constexpr):
    # fp16 -> the output dtype, 8 elements (16 bytes) per thread: torch's converting copy ran at
    # 1.26 TB/s on the H200, this one at ~4 (gate_up M=2048: 234 -> 70 us, RESULTS run 7)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=mask).to(Y.dtype.element_ty), mask=mask)


def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A contiguous tensor in `dtype` (itself when it already is)."""
    if x.dtype == dtype:
        return x
    assert x.is_contiguous(), "cast reads its input as one flat array"
    y = torch.empty(x.shape, dtype=dtype, device=x.device)
    n = x.numel()
    block = 8 * 32 * 8  # 8 warps x 32 threads x 8 elements
    _cast_kernel[(triton.cdiv(n, block),)](x, y, n, BLOCK=block, num_warps=8)
    return y
