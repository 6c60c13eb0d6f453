"""`planes`: the masked-plane int8 tl.dot kernel (triton/pq2_planes.py), sm_80+: the rows from 2 on
that the Gluon kernels do not take (M = 9..16 everywhere, and every prefill row below sm_90).
Bit-identical to legacy without split-K."""

from __future__ import annotations

from dataclasses import replace

import torch
import triton

from radiance.kernels.launch import INTERPRET, Launch
from radiance.kernels.nvidia.pq2.common import reduce, splits_for
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import ROWS_MAX, KernelSpec
from radiance.kernels.triton.pq2_planes import pq2_planes_gemm

NAME = "planes"
PLANES = True
DEPENDENT = False  # its split-K reduce would wait on it in turn: the chain loses more than the launch costs
SPEC = KernelSpec(f"pq2.{NAME}", "cuda", lambda t: (2, ROWS_MAX), (8, 0), None, exact=True)


def tile(n: int, k: int, m: int, sms: int, family: str) -> Tile:
    if m <= 16:
        t = Tile(bn=128, bm=16, warps=4, stages=3, one_dot=True)
    elif m <= 64:
        t = Tile(bn=128, bm=32, warps=4, stages=3, one_dot=True)
    else:  # below sm_90 on 8 warps: the same tile on 4 spills under Triton 3.9 (test_offline_compile)
        sm = int(family[3:]) if family else 0  # "" (no GPU: the CPU interpreter)
        t = Tile(bn=64, bm=128, warps=8 if 0 < sm < 90 else 4, stages=2, one_dot=True)
    return replace(t, split=splits_for(-(-n // t.bn) * -(-m // t.bm), k // 128, sms, 4))


def launch(layer, q, a, t, y, m, tile: Tile, pdl: bool = False) -> None:
    p = y if tile.split == 1 else torch.empty((tile.split, m, layer.n), dtype=torch.float32, device=y.device)
    launch = layer.plan((NAME, tile, y.dtype), lambda: Launch(
        pq2_planes_gemm, {"BN": tile.bn, "BT": tile.bm, "SPLITS": tile.split, "STAGES": tile.stages,
                          "ONE_DOT": tile.one_dot, "ASM": not INTERPRET, "EVEN_N": layer.n % tile.bn == 0},
        tile.warps, tile.stages, tile.maxnreg))
    grid = (triton.cdiv(layer.n, tile.bn), triton.cdiv(m, tile.bm), tile.split)
    launch(grid, q, a, t, layer.qweight, layer.scales, y, p, m, layer.n, layer.k)
    if tile.split > 1:
        reduce(layer, p, y, tile.split)
