"""The pq2 prefill launchers for the Gluon kernels (M > 16, sm_90): `gluon_wgmma` (async int8
wgmma) and `gluon_ws` (the warp-specialized wgmma kernel). Each checks its tile, builds its launch plan once per layer
and tile, and launches; the Gluon modules are imported only where they run."""

from __future__ import annotations

import torch
import triton

from radiance.kernels import gpu
from radiance.kernels import pq2_table as table
from radiance.kernels.launch import Launch
from radiance.kernels.triton.pq2_quant import GROUP


def run_gluon_wgmma(layer, q, a, t, y, m, tile: table.Tile) -> None:
    if (gpu.capability(y.device) or (0, 0))[0] != 9:
        raise table.Pq2ConfigError("the gluon_wgmma pq2 path needs wgmma (sm_90): plan another kernel")
    if tile.warps not in (4, 8) or tile.bn % (16 * tile.warps) or tile.bt not in (16, 32, 64, 128) or tile.splits != 1 \
            or tile.maxnreg or tile.stages < 3:
        raise table.Pq2ConfigError(f"gluon_wgmma tile {tile}: warps 4 or 8 (warpgroups), bn a multiple of 16 x warps, "
                                   "bt 16..128 (a power of two), stages >= 3, no split-K, no maxnreg")
    from radiance.kernels.triton.pq2_gluon_wgmma import pq2_wgmma  # Gluon: imported only where it runs

    def make():
        return Launch(pq2_wgmma, {"BN": tile.bn, "BT": tile.bt, "WARPS": tile.warps, "RING": tile.stages}, tile.warps, 1)

    launch = layer.plan(("gluon_wgmma", tile, y.dtype), make)
    grid = (triton.cdiv(m, tile.bt), triton.cdiv(layer.n, tile.bn))
    launch(grid, q, a, t, layer.qweight32, layer.scales, y, m, layer.n, layer.k, layer.k // GROUP)


def run_gluon_ws(layer, q, a, t, y, m, tile: table.Tile) -> None:
    if (gpu.capability(y.device) or (0, 0))[0] != 9:
        raise table.Pq2ConfigError("the gluon_ws pq2 path needs wgmma and TMA (sm_90): plan another kernel")
    if tile.warps != 4 or tile.bn not in (64, 128) or tile.bt not in (32, 64, 128) \
            or tile.splits != 1 or tile.stages < 2:
        raise table.Pq2ConfigError(f"gluon_ws tile {tile}: 4 warps (one warpgroup), bn 64 or 128 (within one weight "
                                   "block), bt 32, 64 or 128, stages >= 2, no split-K")
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    from radiance.kernels.triton.pq2_gluon_ws import pq2_ws

    def make():  # the weights' descriptor once per layer and tile; the activations' per call
        w_desc = TensorDescriptor.from_tensor(layer.qweight32.view(-1, 8), [tile.bn, 8],
                                              gl.NVMMASharedLayout.get_default_for([tile.bn, 8], gl.int32))
        consts = {"BN": tile.bn, "BT": tile.bt, "WARPS": tile.warps, "RING": tile.stages, "LOADER_REGS": 40}
        return Launch(pq2_ws, consts, tile.warps, 1, tile.maxnreg), w_desc

    launch, w_desc = layer.plan(("gluon_ws", tile, y.dtype), make)
    # one 128-byte row per token and group, swizzled as the wgmma's B operand reads it
    q_desc = TensorDescriptor.from_tensor(q, [tile.bt, 128], gl.NVMMASharedLayout(swizzle_byte_width=128, element_bitwidth=8, rank=2))
    grid = (triton.cdiv(m, tile.bt), triton.cdiv(layer.n, tile.bn))
    launch(grid, q_desc, w_desc, a, t, layer.scales, y, m, layer.n, layer.k // GROUP)
