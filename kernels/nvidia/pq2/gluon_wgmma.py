"""`gluon_wgmma`: async int8 wgmma in Gluon (triton/pq2_gluon_wgmma.py), the weights unpacked into its
register A operand; sm_90. The prefill band from WGMMA_MIN_M rows, and from 17 rows on layers at
least WGMMA_MIN_N wide (where its tiles alone fill the GPU; on narrower layers `planes`' split-K
tiles stay ahead below WGMMA_MIN_M): the crossovers on the H200, docs/perf.md. Bit-identical to legacy."""

from __future__ import annotations

import triton

from radiance.kernels import gpu
from radiance.kernels.launch import Launch
from radiance.kernels.nvidia.pq2.common import SMALL_MAX_M, Pq2ConfigError, sm90
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import ROWS_MAX, KernelSpec, Target
from radiance.kernels.triton.pq2_quant import GROUP

NAME = "gluon_wgmma"
PLANES = True
DEPENDENT = False
WGMMA_MIN_M = 65
WGMMA_MIN_N = 8192


def _rows(t: Target) -> tuple[int, int]:
    return (SMALL_MAX_M + 1 if t.n >= WGMMA_MIN_N else WGMMA_MIN_M), ROWS_MAX


SPEC = KernelSpec(f"pq2.{NAME}", "cuda", _rows, (9, 0), sm90, exact=True)


def tile(n: int, k: int, m: int, sms: int, family: str) -> Tile:
    # narrow token tiles for few rows (a 64-token tile half empty at M = 17 wastes its MMAs), 128
    # weight rows once the rows fill the GPU (the H200 sweep's winners)
    return Tile(bn=128 if m > 64 else 64, bm=32 if m <= 32 else 64, warps=4, stages=4)


def launch(layer, q, a, t, y, m, tile: Tile, pdl: bool = False) -> None:
    if (gpu.capability(y.device) or (0, 0))[0] != 9:
        raise Pq2ConfigError("the gluon_wgmma pq2 path needs wgmma (sm_90): plan another kernel")
    if tile.warps not in (4, 8) or tile.bn % (16 * tile.warps) or tile.bm not in (16, 32, 64, 128) or tile.split != 1 \
            or tile.maxnreg or tile.stages < 3:
        raise Pq2ConfigError(f"gluon_wgmma tile {tile}: warps 4 or 8 (warpgroups), bn a multiple of 16 x warps, "
                             "bm 16..128 tokens (a power of two), stages >= 3, no split-K, no maxnreg")
    from radiance.kernels.triton.pq2_gluon_wgmma import pq2_wgmma  # Gluon: imported only where it runs

    def make():
        return Launch(pq2_wgmma, {"BN": tile.bn, "BT": tile.bm, "WARPS": tile.warps, "RING": tile.stages}, tile.warps, 1)

    launch = layer.plan((NAME, tile, y.dtype), make)
    grid = (triton.cdiv(m, tile.bm), triton.cdiv(layer.n, tile.bn))
    launch(grid, q, a, t, layer.qweight32, layer.scales, y, m, layer.n, layer.k, layer.k // GROUP)
