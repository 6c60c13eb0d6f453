"""`deqt`: the decode GEMM in Triton with the weights dequantized in registers as the MMA's A operand
and the x rows its N side (triton/paro_gemm.py `_paro_deqt_kernel`), split-K; W4A16, the decode band
rows mma_gl does not take. Reads PLAIN fp16 activations."""

from __future__ import annotations

import torch
import triton

from radiance.kernels.nvidia.paroquant.common import ASM, decode, launch_triton, split_decode, staged_smem, w4a16
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import KernelSpec
from radiance.kernels.triton import paro_gemm, paro_rotate

NAME = "deqt"
MODE = paro_rotate.PLAIN
W4A16_ONLY = True
WORDS = False
SPEC = KernelSpec(f"paroquant.{NAME}", "cuda", decode, None, w4a16)
smem = staged_smem


def decode_tile(m: int, n: int, groups: int, sms: int, cap: tuple[int, int], i8: bool = False) -> Tile:
    """BN 64, 4 warps, 3 stages (4 for W4A8's deq), split-K to ~16 programs per SM (8 at BM 64): the
    weights on the MMA's M side pad a few rows of x to 16, not 64 (why it serves the decode band
    ahead of deq). deq's decode tile is the same rule."""
    bm = min(64, max(16, triton.next_power_of_2(m)))
    t = Tile(bm, 64, 4, 4 if i8 else 3, 1, NAME)
    return split_decode(t, m, n, groups, sms, cap, 8 if bm == 64 else 16, 4 if bm == 64 else 8, smem)


prefill_tile = None


def launch(grid, args, t: Tile, has_bias: bool, programs: int, pdl: bool) -> None:
    if args[0].dtype == torch.int8:
        raise ValueError("paroquant deqt is W4A16 only: int8 activations go to fold or deq")
    launch_triton(paro_gemm._paro_deqt_kernel, grid, args, t, has_bias, ASM=ASM)

