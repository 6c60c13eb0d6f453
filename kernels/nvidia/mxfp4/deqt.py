"""`deqt`: the decode band's split-K GEMM, the weights on the MMA's M side (rows 1..RADIANCE_PQ_DECODE_MAX_M).

| M | tile (BM x BN, warps, stages) |
|---|---|
| 1..8 | 16 x 32, 2, 3; split to ~64 programs per SM, <= 8 |
| 9..16 | 16 x 64, 2, 3; ~32 programs per SM, <= 16 |
| 17..64 | 32 / 64 x 64, 4, 3; ~16 programs per SM, <= 8 |

Every split leaves >= 4 chunks (256 k) per program. The H200 sweep of this kernel (docs/perf.md);
sm_8x (unmeasured) runs the same rows. Below sm_80 tl.dot runs on FMA with both operands in
registers (offline SASS: BM 64 spills on 4 warps), so sm_75 keeps paroquant's decode shapes (BM
16/32/64, BN 64, 4 warps, 8 at BM 64, 2 stages); with the per-block e8m0 scaling (a second
accumulator) sm_86's tiles spill on 3 stages, so they run 2 there."""

from __future__ import annotations

from dataclasses import replace

import triton

from radiance.kernels.nvidia.mxfp4.common import fit_tile, launch, smem  # noqa: F401 -- the kind's
from radiance.kernels.nvidia.tile import Tile, smem_limit
from radiance.kernels.registry import KernelSpec

NAME = "deqt"
SPEC = KernelSpec(f"paroquant_mxfp4.{NAME}", "cuda", lambda t: (1, t.decode_max_m))


def tile(m: int, n: int, chunks: int, sms: int, cap: tuple[int, int], per_block: bool = False) -> Tile:
    if cap < (8, 0):
        bm = min(64, max(16, triton.next_power_of_2(m)))
        t, per_sm, most = Tile(bm, 64, 8 if bm == 64 else 4, 2, 1, NAME), 8 if bm == 64 else 16, 8
    elif m <= 8:
        t, per_sm, most = Tile(16, 32, 2, 3, 1, NAME), 64, 8
    elif m <= 16:
        t, per_sm, most = Tile(16, 64, 2, 3, 1, NAME), 32, 16
    else:
        t, per_sm, most = Tile(32 if m <= 32 else 64, 64, 4, 3, 1, NAME), 16, 8
    if per_block and (8, 0) <= cap < (9, 0):
        t = replace(t, stages=2)
    tiles = triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)
    t = replace(t, split=max(1, min(chunks // 4, most, triton.cdiv(per_sm * sms, tiles))))
    return fit_tile(t, smem_limit(cap))
