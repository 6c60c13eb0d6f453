"""`gluon`: int8 mma.sync in Gluon (triton/pq2_gluon.py), the weight words unpacked straight into the
operand registers: M = 2..GLUON_MAX_M on sm_80+. Up to 8 tokens its 8-token MMA wastes nothing and
the words go to the tensor cores without a shared-memory round trip; at 16 tokens `planes`' full
MMA tiles take over (the crossover on the H200: docs/perf.md). Launched dependent on the quantizer
where the GPU can (kernels/pdl.py): its short grid pays its launch in full otherwise."""

from __future__ import annotations

from dataclasses import replace

import torch
import triton

from radiance.kernels import gpu
from radiance.kernels.launch import Launch
from radiance.kernels.nvidia import pool
from radiance.kernels.nvidia.pq2.common import Pq2ConfigError, gluon, splits_for
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import KernelSpec
from radiance.kernels.triton.pq2_quant import GROUP
from radiance.kernels.triton.split_finish import stream_programs

NAME = "gluon"
PLANES = True
DEPENDENT = True
GLUON_MAX_M = 8
SPEC = KernelSpec(f"pq2.{NAME}", "cuda", lambda t: (2, GLUON_MAX_M), (8, 0), gluon)


def tile(n: int, k: int, m: int, sms: int, family: str) -> Tile:
    t = Tile(bn=128, bm=8, gpi=2, stages=1)
    return replace(t, split=splits_for(-(-n // t.bn) * -(-m // t.bm), k // 128, sms, 4))


def launch(layer, q, a, t, y, m, tile: Tile, pdl: bool = False) -> None:
    if (gpu.capability(y.device) or (0, 0)) < (8, 0):
        raise Pq2ConfigError("the gluon pq2 path needs mma.sync int8 (sm_80+): plan another kernel")
    rt = tile.bn // (16 * tile.warps)  # m16 row tiles per warp
    ring = tile.stages if tile.stages > 1 else 0
    if tile.bm not in (8, 16) or tile.bn % (16 * tile.warps) or rt & (rt - 1) or tile.maxnreg \
            or not 1 <= tile.gpi <= 4 or (ring and tile.gpi != 1):
        raise Pq2ConfigError(f"gluon tile {tile}: bm must be 8 or 16 tokens, bn a power-of-two multiple of 16 x "
                             "warps, gpi (groups per step) 1..4 (1 with a cp.async ring, stages > 1), no maxnreg")
    from radiance.kernels.triton.pq2_gluon import pq2_mma_gl  # Gluon: imported only where it runs

    groups = layer.k // GROUP
    gps = -(-groups // tile.split)
    splits = -(-groups // gps)
    tiles = triton.cdiv(m, tile.bm) * triton.cdiv(layer.n, tile.bn)
    grid = (triton.cdiv(m, tile.bm), triton.cdiv(layer.n, tile.bn), splits)
    if tile.persist:  # stream-K: `splits` becomes the most programs sharing a tile (its partial slots)
        progs, splits = stream_programs(tile.persist * (gpu.sm_count(y.device) or 132), m, layer.n, tile.bm, tile.bn,
                                        groups)
        grid = (1, 1, progs)
    tickets = pool.get(y.device, "pq2 gluon").cnt
    if tickets.numel() < tiles:
        raise RuntimeError(f"pq2 gluon: split-K tickets for {tiles} tiles not reserved on {y.device} "
                           "(pq2_ops.prepare reserves them; prepare the layer on this device first)")
    p = y if splits == 1 else torch.empty((splits, m, layer.n), dtype=torch.float32, device=y.device)

    def make():
        return Launch(pq2_mma_gl, {"BN": tile.bn, "BT": tile.bm, "WARPS": tile.warps, "GU": tile.gpi, "RING": ring,
                                    "STREAM": tile.persist > 0, "PDL": pdl}, tile.warps, 1, pdl=pdl)

    launch = layer.plan((NAME, tile, y.dtype, pdl), make)
    launch(grid, q.view(torch.int32), a, t, layer.qweight32, layer.scales, y, p, tickets,
           m, layer.n, layer.k, groups, gps, splits)
