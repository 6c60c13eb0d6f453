"""`mma_gl`: the decode GEMM on the tensor cores in Gluon (triton/paro_mma_gluon.py): mma.sync with
the weight words unpacked into fragment registers, fed by a cp.async ring; W4A16, sm_80+, rows
1..MMA_GL_MAX_M, 8 tokens per program (16 above 8). Reads the prologue's F16GF activations."""

from __future__ import annotations

from dataclasses import replace

import torch
import triton

from radiance.kernels.nvidia.paroquant.common import gluon_w4a16
from radiance.kernels.nvidia.tile import Tile, fit, smem_limit
from radiance.kernels.registry import KernelSpec
from radiance.kernels.triton import paro_rotate
from radiance.kernels.triton.split_finish import stream_programs

NAME = "mma_gl"
MODE = paro_rotate.F16GF
W4A16_ONLY = True
WORDS = True  # reads the weights as int32 words
MMA_GL_MAX_M = 16  # W4A16 rows 1..this on sm_80+
# BN-64 programs that split-K leaves with this few groups each have too short a loop to hide the ring's
# latency with two row tiles per warp: they run one per warp on 4 warps, twice the warps on the same grid
SHORT_SPLIT_GROUPS = 8
# A dependent launch (kernels/pdl.py, sm_90+) hides the GEMM's launch behind its prologue, which pays
# only where the GEMM is short next to its launch: the 8-token tiles up to this split. Longer grids
# (split 8, the 16-token tiles) lose more to the wait at their top than the launch costs.
PDL_MAX_SPLIT = 4
# its 16-token tile on a stream-K grid takes 165 registers (offline SASS, sm_90): 3 programs of 4 warps per SM
STREAM_PER_SM_16 = 3

SPEC = KernelSpec(f"paroquant.{NAME}", "cuda", lambda t: (1, MMA_GL_MAX_M), (8, 0), gluon_w4a16)


def smem(t: Tile, act_bytes: int = 2) -> int:
    """1 KB for the final sum; from 2 stages a ring of weight tiles; from 3 also the activation
    words, scales, zero points and token scales / sums."""
    if t.stages == 1:
        return 1024
    if t.stages > 2:
        return 1024 + t.stages * (t.bn * 64 + t.bm * 256 + t.bn * 3 + t.bm * 8)
    return 1024 + t.stages * t.gpi * t.bn * 64


def stream_tile(t: Tile, m: int, n: int, groups: int, sms: int, per_sm: int) -> Tile:
    """`t` on a stream-K grid of per_sm programs per SM, its split the partial slots that needs."""
    return replace(t, persist=per_sm, split=stream_programs(per_sm * sms, m, n, t.bm, t.bn, groups)[1])


def decode_tile(m: int, n: int, groups: int, sms: int, cap: tuple[int, int], i8: bool = False) -> Tile:
    # The weights, activations, scales and zero points stream through a 4-stage cp.async ring (a
    # register prefetch is sunk by ptxas to the loop's end, so it would not overlap the math). Two
    # m16 row tiles per warp; BN 128 on 4 warps on layers wide enough to fill the GPU with them (the
    # program's activation copy then serves more rows), else BN 64 on 2. Split-K to ~8 programs per
    # SM counted in BN-64 blocks (a power of two, at most 8): enough weight loads in flight to
    # stream the weights at full bandwidth. From 9 rows 16 tokens per program need more registers
    # per stage: 3 stages, ~5 programs per SM (the 132-146 registers leave room for 3 to 7). Where
    # BN-128 tiles leave the last wave partly empty (gate_up: 544 programs on 396 slots), a stream-K
    # grid of STREAM_PER_SM_16 programs per SM shares all (tile, group) steps equally instead; on
    # BN-64 layers one program per tile already fills the GPU. The constants are the H200 sweep's
    # (bench/sweep_paro_decode.py; docs/perf.md).
    bn, warps = (128, 4) if n >= 128 * sms else (64, 2)
    limit = smem_limit(cap)
    if m <= 8:
        want = max(1, min(8, groups // 2, triton.cdiv(8 * sms, triton.cdiv(n, 64))))
        split = 1 << (want.bit_length() - 1)
        if bn == 64 and split > 1 and groups // split <= SHORT_SPLIT_GROUPS:
            warps = 4  # one m16 row tile per warp: twice the warps on the same grid
        return fit(Tile(8, bn, warps, 4, split, NAME), limit, smem)
    if bn == 128:
        t = fit(Tile(16, bn, warps, 3, 1, NAME), limit, smem)
        return stream_tile(t, m, n, groups, sms, min(STREAM_PER_SM_16, limit // smem(t, 2)))
    want = max(1, min(8, groups // 2, 5 * sms // triton.cdiv(n, bn)))
    return fit(Tile(16, bn, warps, 3, 1 << (want.bit_length() - 1), NAME), limit, smem)


prefill_tile = None


def dependent(t: Tile) -> bool:
    """Whether it launches dependent on its prologue where the GPU can (kernels/pdl.py): 8-token
    tiles on a tiles x split grid with a short split (PDL_MAX_SPLIT)."""
    return t.bm == 8 and not t.persist and t.split <= PDL_MAX_SPLIT


def launch(grid, args, t: Tile, has_bias: bool, programs: int, pdl: bool) -> None:
    from radiance.kernels.triton.paro_mma_gluon import launch as run  # Gluon: imported only where it runs

    a, s, rs, part = args[0], args[1], args[2], args[8]
    if a.dtype != torch.float16 or s is part or rs is part:
        raise ValueError("paroquant mma_gl reads the prologue's F16GF activations with their scales and sums")
    run(grid, args, bm=t.bm, bn=t.bn, num_warps=t.warps, num_stages=t.stages, has_bias=has_bias, maxnreg=t.maxnreg,
        stream=programs > 0, pdl=pdl)
