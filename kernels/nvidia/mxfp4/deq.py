"""`deq`: the tiled GEMM above the decode band, fitted to the card's shared memory and split along K
(at most 8 ways, >= 8 chunks per program) where its tiles leave the GPU short.

| rows | tile (BM x BN, warps, stages) |
|---|---|
| up to MID_MAX_M, W4A16, a card's tuned mid-band tiles (tiles/<arch>.json) | N >= WIDE_N (`mid_wide`): split to ~8 programs per SM; narrower (`mid_narrow`): to ~1 per SM |
| above, or untuned | 128 x 128, 8 warps, 3 stages on sm_90 and 2 on sm_8x; no split unless the tiles leave the GPU half idle |

On the H200 the mid band's tiles are its sweep's (64 x 128, 4, 3 wide; 128 x 256, 8, 3 narrower).
sm_86's 128 x 128 prefill tile spills on 3 stages, not on 2; with the per-block e8m0 scaling (a
second accumulator) 128 x 128 spills on sm_86 and sm_90, so it runs 64 x 128 on sm_90 and 128 x 64
on sm_8x; sm_75 a 64 x 64 tile on 8 warps (offline SASS: kernels/tests/test_offline_compile_mxfp4.py).
W4A8 keeps the 128 x 128 tile (unswept)."""

from __future__ import annotations

from dataclasses import replace

import triton

from radiance.kernels.nvidia import tile as tiles
from radiance.kernels.nvidia.mxfp4.common import fit_tile, launch, smem  # noqa: F401 -- the kind's
from radiance.kernels.nvidia.tile import Tile, smem_limit
from radiance.kernels.registry import ROWS_MAX, KernelSpec

NAME = "deq"
MID_MAX_M = 512  # rows up to this may take a card's tuned mid-band tiles
WIDE_N = 8192  # ... `mid_wide` on layers at least this wide, `mid_narrow` below
SPEC = KernelSpec(f"paroquant_mxfp4.{NAME}", "cuda", lambda t: (t.decode_max_m + 1, ROWS_MAX))


def tile(m: int, n: int, chunks: int, sms: int, cap: tuple[int, int], fp8: bool = False,
         per_block: bool = False) -> Tile:
    if not (fp8 or per_block) and m <= MID_MAX_M:
        wide = n >= WIDE_N
        found = tiles.lookup(tiles.arch(cap), "paroquant_mxfp4", NAME, None, None, "mid_wide" if wide else "mid_narrow")
        if found is not None:
            t = replace(found, kind=NAME)
            n_tiles = triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)
            return replace(t, split=max(1, min(8, chunks // 8, triton.cdiv(8 * sms, n_tiles) if wide else sms // n_tiles)))
    if cap >= (9, 0):
        t = Tile(64 if per_block else 128, 128, 8, 3, 1, NAME)
    elif cap >= (8, 0):
        t = Tile(128, 64 if per_block else 128, 8, 2, 1, NAME)
    else:
        t = Tile(64, 64, 8, 2, 1, NAME)
    t = fit_tile(t, smem_limit(cap), 1 if fp8 else 2)
    n_tiles = triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)
    return replace(t, split=max(1, min(8, chunks // 8, 2 * sms // n_tiles)))
