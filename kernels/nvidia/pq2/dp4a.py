"""`dp4a`: the DP4A GEMV (triton/pq2_gemv.py): M = 1 on every card, and every row below sm_80 (Triton
has no int8 tensor-core dots on sm_75: its last entry in KERNELS). Launched dependent on the
quantizer where the GPU can (kernels/pdl.py): its short grid pays its launch in full otherwise."""

from __future__ import annotations

from dataclasses import replace

import torch
import triton

from radiance.kernels.launch import INTERPRET, Launch
from radiance.kernels.nvidia.pq2.common import Pq2ConfigError, reduce, splits_for
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import ROWS_MAX, KernelSpec
from radiance.kernels.triton.pq2_gemv import pq2_gemv_dp4a

NAME = "dp4a"
PLANES = True
DEPENDENT = True
M1 = KernelSpec(f"pq2.{NAME}", "cuda", lambda t: (1, 1))
EVERY_ROW = KernelSpec(f"pq2.{NAME}", "cuda", lambda t: (1, ROWS_MAX))
# the heuristic's M = 1 GEMV: the [BN, BC, 8] tile on block-major weights, two row sub-tiles sharing
# each activation load (the H200's tuned tiles of the wide / narrow 27B shapes)
_WIDE = Tile(bn=16, gpi=8, rr=2)
_NARROW = Tile(bn=16, gpi=16, warps=8, rr=2)
# token rows (the DP4A GEMV at M > 1: sm_75's small band) keep a single sub-tile
_ROWS_WIDE = Tile(bn=16, gpi=8)
_ROWS_NARROW = Tile(bn=8, gpi=16)


def tile(n: int, k: int, m: int, sms: int, family: str) -> Tile:
    # the H200 sweeps: wide layers 16 rows x 8 groups, narrow ones 16 x 16 (8 warps)
    if m == 1:
        t = _WIDE if n >= 8192 else _NARROW
    else:  # token rows sharing each weight word
        t = replace(_ROWS_WIDE if n >= 8192 else _ROWS_NARROW, mr=2 if m == 2 else 4)
    # every timed rows tile ran unsplit (its programs already re-use each weight word mr times)
    return replace(t, split=splits_for(-(-n // t.bn), -(-(k // 128) // t.gpi), sms, 2) if t.mr == 1 else 1)


def launch(layer, q, a, t, y, m, tile: Tile, pdl: bool = False) -> None:
    if tile.rr < 1 or tile.bn % tile.rr or (tile.bn // tile.rr) & (tile.bn // tile.rr - 1):
        raise Pq2ConfigError(f"dp4a tile {tile}: rr must divide bn into power-of-two sub-tiles")
    p = y if tile.split == 1 else torch.empty((tile.split, m, layer.n), dtype=torch.float32, device=y.device)
    groups = layer.k // 128
    per = -(-(-(-groups // tile.gpi)) // tile.split) * tile.gpi  # groups per split, as the kernel computes it
    even = layer.n % tile.bn == 0 and groups % per == 0 and per % tile.gpi == 0 and groups // per == tile.split
    launch = layer.plan((NAME, tile, y.dtype, pdl), lambda: Launch(
        pq2_gemv_dp4a, {"BN": tile.bn, "BC": tile.gpi, "MR": tile.mr, "RR": tile.rr, "SPLITS": tile.split,
                        "STAGES": tile.stages, "ASM": not INTERPRET, "EVEN": even, "PDL": pdl}, tile.warps, 1,
        tile.maxnreg, pdl=pdl))
    grid = (triton.cdiv(layer.n, tile.bn), tile.split, triton.cdiv(m, tile.mr))
    launch(grid, q.view(torch.int32), a, t, layer.qweight32, layer.scales, y, p, m, layer.n, layer.k, layer.k // 16)
    if tile.split > 1:
        reduce(layer, p, y, tile.split)
