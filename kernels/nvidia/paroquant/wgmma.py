"""`wgmma`: sm_90's fused W4A16 GEMM in Gluon (triton/paro_wgmma.py): fp16 wgmma with the weights
dequantized into its register operand, the activations through a cp.async ring. The scratch path
dequantizes the whole weight whatever M is, so for few prefill rows the fused kernel is ahead --
on layers wide enough to fill the GPU without split-K (WGMMA_MIN_N), up to WGMMA_MAX_M rows, where
the crossover lies on the H200 (docs/perf.md). Behind the scratch path it takes every prefill row
(when the scratch path is disabled). Reads PLAINW activations."""

from __future__ import annotations

from radiance.kernels.nvidia.paroquant.common import gluon_w4a16, prefill
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import KernelSpec, Target
from radiance.kernels.triton import paro_rotate
from radiance.kernels.formats.paroquant import GROUP_SIZE

NAME = "wgmma"
MODE = paro_rotate.PLAINW
W4A16_ONLY = True
WORDS = True
WGMMA_MAX_M = 256
WGMMA_MIN_N = 8192
WGMMA_BT128_MAX_M = 128  # prefill rows up to this take the 128-token tile, 256 tokens above


def _sm90(t: Target) -> str | None:
    return "wgmma is sm_90 only" if (t.cap or (0, 0))[0] != 9 else gluon_w4a16(t)


def _wide(t: Target) -> tuple[int, int]:
    return (t.decode_max_m + 1, WGMMA_MAX_M) if t.n >= WGMMA_MIN_N else (1, 0)


WIDE = KernelSpec(f"paroquant.{NAME}", "cuda", _wide, None, _sm90)
PREFILL = KernelSpec(f"paroquant.{NAME}", "cuda", prefill, None, _sm90)


def smem(t: Tile, act_bytes: int = 2) -> int:
    return 1024 + t.stages * t.bm * GROUP_SIZE * 2  # the activation ring only (weights go straight to registers)


decode_tile = None


def prefill_tile(cap: tuple[int, int], m: int = 2048) -> Tile:
    """256 tokens x 128 rows (each dequantized weight fragment serves the most tokens), 128-token
    tiles up to WGMMA_BT128_MAX_M, where 256 would leave too few programs."""
    return Tile(128 if m <= WGMMA_BT128_MAX_M else 256, 128, 8, 3, 1, NAME)


def launch(grid, args, t: Tile, has_bias: bool, programs: int, pdl: bool) -> None:
    from radiance.kernels.triton.paro_wgmma import launch as run  # Gluon, sm_90: imported only where it runs

    if t.maxnreg or t.gpi != 1:
        raise ValueError(f"paroquant wgmma: no register cap (maxnreg={t.maxnreg}) and one group per step (gpi={t.gpi})")
    run(grid, args, bm=t.bm, bn=t.bn, num_warps=t.warps, num_stages=t.stages, has_bias=has_bias)
