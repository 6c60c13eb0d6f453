"""`gluon_wgmma`: async int8 wgmma in Gluon (triton/pq2_gluon_wgmma.py), the weights unpacked into its
register A operand; sm_90. The prefill band from WGMMA_MIN_M rows: on the H200 (best tile of each)
faster than `planes` at M = 512 and 2048 on every shape; at M = 64 planes' split-K tiles keep down
and out. On layers at least WGMMA_MIN_N wide from M = 17 (gluon_ws takes those up to 64): with 64 x
32 token tiles at M <= 32 and 64 x 64 above it beats `planes` on gate_up, on qkv from M = 48 (a tie
below) and on lm_head (2-3x); on N = 5120 planes' split-K tiles stay ahead. Bit-identical to legacy."""

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
    # the H200's winners: 128 x 64 at M >= 512 on gate_up, down, qkv, out; 64 x 64 at M = 64; 64 x
    # 32 at M <= 32 (~1.6x faster than 64 x 64 at M = 17)
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
