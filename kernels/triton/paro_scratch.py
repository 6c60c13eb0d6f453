"""The paroquant prefill pieces around cuBLAS (the dequant-to-scratch path, and the fallback GEMM
below Ampere): the int4 weights dequantized to a dense fp16 scratch, and the output cast.

Numerics: OUT = ((c - 8) - d) * sc in fp32, rounded once to fp16 -- the same value the fused
kernels' dequant forms (paro_gemm's layout: Wb [G, N, 64], low nibble k = t, high k = 64 + t).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from radiance.kernels.triton import paro_rotate


@triton.jit
def _dequant_kernel(W, SC, D, OUT, N0, N1, N, K, BN: tl.constexpr):
    # OUT[n - N0, k] = ((c - 8) - d) * sc in fp16 for rows N0 <= n < N1: the dequant-to-scratch path
    # (cuBLAS below Ampere), a whole weight or one piece of it
    g = tl.program_id(0)
    offs_n = N0 + tl.program_id(1) * BN + tl.arange(0, BN)
    offs_t = tl.arange(0, 64)
    nmask = offs_n < N1
    w = tl.load(W + (g * N + offs_n[:, None]) * 64 + offs_t[None, :], mask=nmask[:, None], other=0)
    sc = tl.load(SC + g * N + offs_n, mask=nmask, other=0.0).to(tl.float32)
    d = tl.load(D + g * N + offs_n, mask=nmask, other=0).to(tl.float32)
    lo = (((w & 15).to(tl.float32) - 8.0) - d[:, None]) * sc[:, None]
    hi = (((w >> 4).to(tl.float32) - 8.0) - d[:, None]) * sc[:, None]
    base = OUT + (offs_n - N0)[:, None] * K + g * 128 + offs_t[None, :]
    tl.store(base, lo.to(tl.float16), mask=nmask[:, None])
    tl.store(base + 64, hi.to(tl.float16), mask=nmask[:, None])


def dequant(wb, sc, d, out: torch.Tensor, n0: int = 0, n1: int | None = None) -> torch.Tensor:
    """Rows n0..n1 (default: all) of the dense fp16 W [N, K] from Wb/SC/D, written into `out`
    ([n1 - n0, K], a preallocated scratch view)."""
    g, n, _ = wb.shape
    n1 = n if n1 is None else n1
    bn = 64
    _dequant_kernel[(g, triton.cdiv(n1 - n0, bn))](wb, sc, d, out, n0, n1, n, g * 128, BN=bn, num_warps=4)
    return out


def scratch_elems(n: int, k: int, rows: int) -> int:
    """fp16 elements the scratch path of an [n, k] weight needs: the whole dequantized weight, or
    (rows > 0) two buffers of `rows` weight rows each."""
    return n * k if not rows else 2 * min(rows, n) * k


def pieces(edges: list[int], rows: int) -> list[tuple[int, int, int]]:
    """(partition, n0, n1) of at most `rows` output columns each (0: one per partition), never
    straddling a partition edge."""
    out = []
    for p, (e0, e1) in enumerate(zip(edges, edges[1:])):
        step = rows or (e1 - e0)
        out += [(p, n0, min(n0 + step, e1)) for n0 in range(e0, e1, step)]
    return out


def _mm(a, w, bias, out):
    if bias is None:
        torch.mm(a, w.t(), out=out)
    else:  # cuBLAS adds the bias before its one rounding
        torch.addmm(bias.to(a.dtype), a, w.t(), out=out)


def pipelined_gemm(act, wb, sc, d, bufs: list[torch.Tensor], cuts: list[tuple[int, int, int]],
                   bias: torch.Tensor | None, m: int, n: int) -> torch.Tensor:
    """y [m, n] (fp16) = act()[p] @ W[n0:n1].T (+ bias) piece by piece (`cuts`, from `pieces`), each
    piece of W dequantized into one of the two `bufs` on a side stream while the GEMM of the piece
    before it runs on the current one, so the scratch holds two pieces, not the whole weight.
    `act` returns the rotated activations [P, m, K]; it is called after the first dequant is
    queued, so the two overlap too. Off CUDA the pieces run in turn."""
    k = wb.shape[0] * 128
    views = [bufs[i % 2][: (n1 - n0) * k].view(n1 - n0, k) for i, (_, n0, n1) in enumerate(cuts)]
    if not bufs[0].is_cuda:
        a = act()
        y = torch.empty(m, n, dtype=a.dtype, device=a.device)
        for (p, n0, n1), w in zip(cuts, views):
            _mm(a[p], dequant(wb, sc, d, w, n0, n1), None if bias is None else bias[n0:n1], y[:, n0:n1])
        return y
    main = torch.cuda.current_stream(bufs[0].device)
    side = side_stream(bufs[0].device)
    side.wait_stream(main)  # fork (also what CUDA-graph capture needs to follow the side stream)
    ready = [torch.cuda.Event(), torch.cuda.Event()]
    freed = [torch.cuda.Event(), torch.cuda.Event()]

    def queue_dequant(i):
        p, n0, n1 = cuts[i]
        with torch.cuda.stream(side):
            if i >= 2:
                side.wait_event(freed[i % 2])  # the GEMM that read this buffer is done
            dequant(wb, sc, d, views[i], n0, n1)
            ready[i % 2].record(side)

    queue_dequant(0)
    a = act()
    y = torch.empty(m, n, dtype=a.dtype, device=a.device)
    for i, (p, n0, n1) in enumerate(cuts):
        if i + 1 < len(cuts):
            queue_dequant(i + 1)
        main.wait_event(ready[i % 2])
        _mm(a[p], views[i], None if bias is None else bias[n0:n1], y[:, n0:n1])
        freed[i % 2].record(main)
    main.wait_stream(side)  # join
    return y


_SIDE: dict[torch.device, torch.cuda.Stream] = {}


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """The dequant's stream on `device` (created once, outside graph capture: prepare calls it)."""
    if device not in _SIDE:
        _SIDE[device] = torch.cuda.Stream(device)
    return _SIDE[device]


@triton.jit
def _cast_kernel(X, Y, n, BLOCK: tl.constexpr):
    # fp16 -> the output dtype, 8 elements (16 bytes) per thread: on the H200 torch's converting
    # copy runs at ~1.3 TB/s, this one at ~4
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


def forward(layer, x: torch.Tensor, bias: torch.Tensor | None, deq: torch.Tensor) -> torch.Tensor:
    """The scratch path of a prepared paroquant layer (paro_ops.ParoLayer): rotate, dequantize into
    `deq` (the reserved scratch) -- whole, or in pieces of layer.scratch_rows on a side stream --,
    one cuBLAS GEMM per partition or piece writing its column slice of y in place, cast to x's dtype."""
    edges = [0] + [b for b in layer.bounds if b < layer.n] + [layer.n]
    if layer.scratch_rows:  # pieces of the weight, double-buffered, dequantized beside the GEMMs
        half = scratch_elems(layer.n, layer.k, layer.scratch_rows) // 2
        y = pipelined_gemm(lambda: paro_rotate.rotate(x, layer.tables, paro_rotate.PLAIN)[0], layer.wb, layer.sc,
                           layer.d, [deq[:half], deq[half:2 * half]], pieces(edges, layer.scratch_rows), bias,
                           x.shape[0], layer.n)
        return cast(y, x.dtype)
    a, _, _ = paro_rotate.rotate(x, layer.tables, paro_rotate.PLAIN)
    w = dequant(layer.wb, layer.sc, layer.d, deq[: layer.n * layer.k].view(layer.n, layer.k))
    y = torch.empty(x.shape[0], layer.n, dtype=a.dtype, device=x.device)
    for p, e0, e1 in pieces(edges, 0):  # each partition's GEMM writes its column slice in place (no cat)
        _mm(a[p], w[e0:e1], None if bias is None else bias[e0:e1], y[:, e0:e1])
    return cast(y, x.dtype)
