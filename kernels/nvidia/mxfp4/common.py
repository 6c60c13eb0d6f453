"""What the paroquant_mxfp4 kinds share: shared memory, the fit (BN down to 32) and the launch of
the one Triton kernel both run (triton/mxfp4_gemm.py: `deqt` with the weights on the MMA's M side,
`deq` tiled)."""

from __future__ import annotations

from radiance.kernels.nvidia.tile import Tile, fit
from radiance.kernels.triton import mxfp4_gemm


def smem(t: Tile, act_bytes: int = 2) -> int:
    """Shared memory a tile asks for (estimate): the pipelined weight bytes, block exponents and
    activations per stage, plus a dequantized weight chunk staged once."""
    return t.stages * (t.bn * 34 + t.bm * 64 * act_bytes) + t.bn * 64 * act_bytes


def fit_tile(t: Tile, limit: int, act_bytes: int = 2) -> Tile:
    return fit(t, limit, smem, act_bytes, 32, "mxfp4")


def launch(layer, a, s, y, t: Tile, part, cnt, bias):
    return mxfp4_gemm.gemm(t.kind, a, s, layer.wb, layer.ex, layer.rsc, y, bm=t.bm, bn=t.bn, split=t.split,
                           pb1=layer.bounds[0], pb2=layer.bounds[1], per_block=layer.per_block, part=part,
                           cnt=cnt, num_warps=t.warps, num_stages=t.stages, bias=bias)
