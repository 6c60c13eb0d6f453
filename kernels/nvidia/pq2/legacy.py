"""`legacy`: the simplest correct pq2 kernel (triton/pq2_legacy.py), one decode + int8 dot per group,
sm_80+; every row where nothing ahead of it in the plan takes them. Bit-identical to the reference
order (what the `exact` fixture compares the others with). Reads natural-order int8 activations."""

from __future__ import annotations

import triton

from radiance.kernels.launch import Launch
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import ROWS_MAX, KernelSpec
from radiance.kernels.triton.pq2_legacy import pq2_legacy_gemm

NAME = "legacy"
PLANES = False  # reads the activations in natural order, not plane order
DEPENDENT = False
SPEC = KernelSpec(f"pq2.{NAME}", "cuda", lambda t: (1, ROWS_MAX), (8, 0), None, exact=True)


def tile(n: int, k: int, m: int, sms: int, family: str) -> Tile:
    return Tile(bn=64, bm=16 if m <= 16 else 64, warps=4, stages=1)


def launch(layer, q, a, t, y, m, tile: Tile, pdl: bool = False) -> None:
    launch = layer.plan((NAME, tile, y.dtype),
                        lambda: Launch(pq2_legacy_gemm, {"BM": tile.bm, "BN": tile.bn}, tile.warps, tile.stages,
                                       tile.maxnreg))
    grid = (triton.cdiv(layer.n, tile.bn), triton.cdiv(m, tile.bm))
    launch(grid, q, a, layer.qweight, layer.scales, y, m, layer.n, layer.k)
