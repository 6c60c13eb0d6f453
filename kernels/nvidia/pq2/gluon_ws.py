"""`gluon_ws`: the warp-specialized int8 wgmma kernel in Gluon (triton/pq2_gluon_ws.py: a loader warp
feeds TMA stages, the warpgroup only waits, unpacks, multiplies and folds); sm_90. The loader warp
hides the loads where the grid is short (the wide layers' M = 17..64, the narrow layers' M =
65..WS_MAX_M); with many rows gluon_wgmma's larger tiles win (the crossovers on the H200,
docs/perf.md). Bit-identical to legacy."""

from __future__ import annotations

import triton

from radiance.kernels import gpu
from radiance.kernels.launch import Launch
from radiance.kernels.nvidia.pq2.common import SMALL_MAX_M, Pq2ConfigError, sm90
from radiance.kernels.nvidia.pq2.gluon_wgmma import WGMMA_MIN_M, WGMMA_MIN_N
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import KernelSpec, Target
from radiance.kernels.triton.pq2_quant import GROUP

NAME = "gluon_ws"
PLANES = True
DEPENDENT = False
WS_MAX_M = 512


def _rows(t: Target) -> tuple[int, int]:
    return (SMALL_MAX_M + 1, WGMMA_MIN_M - 1) if t.n >= WGMMA_MIN_N else (WGMMA_MIN_M, WS_MAX_M)


SPEC = KernelSpec(f"pq2.{NAME}", "cuda", _rows, (9, 0), sm90, exact=True)


def tile(n: int, k: int, m: int, sms: int, family: str) -> Tile:
    # 64 weight rows x 32 tokens up to M = 32, x 64 above; 80 registers fit 3 programs per SM (the
    # H200 sweep's winners)
    return Tile(bn=64, bm=32 if m <= 32 else 64, warps=4, stages=4, maxnreg=80)


def launch(layer, q, a, t, y, m, tile: Tile, pdl: bool = False) -> None:
    if (gpu.capability(y.device) or (0, 0))[0] != 9:
        raise Pq2ConfigError("the gluon_ws pq2 path needs wgmma and TMA (sm_90): plan another kernel")
    if tile.warps != 4 or tile.bn not in (64, 128) or tile.bm not in (32, 64, 128) \
            or tile.split != 1 or tile.stages < 2:
        raise Pq2ConfigError(f"gluon_ws tile {tile}: 4 warps (one warpgroup), bn 64 or 128 (within one weight "
                             "block), bm 32, 64 or 128 tokens, stages >= 2, no split-K")
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from radiance.kernels.triton.pq2_gluon_ws import pq2_ws

    def make():  # the weights' descriptor once per layer and tile; the activations' per call
        w_desc = TensorDescriptor.from_tensor(layer.qweight32.view(-1, 8), [tile.bn, 8],
                                              gl.NVMMASharedLayout.get_default_for([tile.bn, 8], gl.int32))
        consts = {"BN": tile.bn, "BT": tile.bm, "WARPS": tile.warps, "RING": tile.stages, "LOADER_REGS": 40}
        return Launch(pq2_ws, consts, tile.warps, 1, tile.maxnreg), w_desc

    launch, w_desc = layer.plan((NAME, tile, y.dtype), make)
    # one 128-byte row per token and group, swizzled as the wgmma's B operand reads it
    q_desc = TensorDescriptor.from_tensor(q, [tile.bm, 128], gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2))
    grid = (triton.cdiv(m, tile.bm), triton.cdiv(layer.n, tile.bn))
    launch(grid, q_desc, w_desc, a, t, layer.scales, y, m, layer.n, layer.k // GROUP)
