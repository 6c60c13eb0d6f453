"""Split-K without a second launch (paroquant's Triton GEMMs; its Gluon kernels, and pq2's, follow
the same scheme in Gluon).

Each program stores its fp32 partial, takes an atomic ticket for its output tile, and the last
program of the tile sums the partials in split order and writes y, rounded once (deterministic;
the same fp32 operations as pq2_common.reduce_splits' separate launch). The ticket resets itself
(the counters and the scratch are allocated once, outside CUDA-graph capture). For a pq2 DP4A GEMV
with many programs it measured slower than that separate launch on the H200.

Stream-K (the Gluon mma.sync decode kernels of both methods, `STREAM`): a grid of a few programs
per SM, program p taking the p-th equal share of all (output tile, group) steps, tile-major; a
tile's contributors finish it through the same partials and ticket, in program order.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def finish_tile(acc, Y, BIAS, PART, CNT, offs_m, offs_n, mmask, nmask, M, N, SPLIT, pid_k, tile,
                HAS_BIAS: tl.constexpr):
    # acc [BM, BN] fp32 (+ bias) -> y. SPLIT > 1: partial to PART[pid_k], ticket CNT[tile]
    y_ptr = Y + offs_m[:, None] * N + offs_n[None, :]
    ymask = mmask[:, None] & nmask[None, :]
    if HAS_BIAS:
        bias = tl.load(BIAS + offs_n, mask=nmask, other=0.0).to(tl.float32)
    if SPLIT == 1:
        if HAS_BIAS:
            acc += bias[None, :]
        tl.store(y_ptr, acc.to(Y.dtype.element_ty), mask=ymask)
    else:
        mn = M * N
        part = PART + offs_m[:, None] * N + offs_n[None, :]
        tl.store(part + pid_k * mn, acc, mask=ymask)
        # every thread's partial is stored before the ticket's release (one thread takes it)
        tl.debug_barrier()
        ticket = tl.atomic_add(CNT + tile, 1, sem="acq_rel")
        if ticket == SPLIT - 1:
            tot = tl.zeros(acc.shape, dtype=tl.float32)
            for z in range(SPLIT):
                tot += tl.load(part + z * mn, mask=ymask, other=0.0, cache_modifier=".cg")
            if HAS_BIAS:
                tot += bias[None, :]
            tl.store(y_ptr, tot.to(Y.dtype.element_ty), mask=ymask)
            tl.atomic_xchg(CNT + tile, 0)


def stream_programs(programs: int, m: int, n: int, bm: int, bn: int, groups: int) -> tuple[int, int]:
    """A stream-K launch of `programs` programs over the (output tile, group) steps of an [m, n]
    output: (the programs that get a step, the most of them that share one tile -- the split-K
    partial slots it needs). Program p takes steps p W / P .. (p + 1) W / P (floored), so a tile's G
    steps meet at most ceil(G / floor(W / P)) + 1 programs."""
    work = triton.cdiv(m, bm) * triton.cdiv(n, bn) * groups
    progs = max(1, min(programs, work))
    return progs, min(progs, triton.cdiv(groups, work // progs) + 1)
