"""`deq`: the GEMM in Triton with the weights as the MMA's B operand, dequantized through shared
memory (triton/paro_gemm.py `_paro_deq_kernel`): W4A16 above the decode band (where the scratch path
and wgmma do not take the rows), and W4A8's decode band (sm_80+: per-group int8 activations, the
zero point folded per group). Reads PLAIN fp16 or I8G activations."""

from __future__ import annotations

from dataclasses import replace

from radiance.kernels.nvidia.paroquant import deqt
from radiance.kernels.nvidia.paroquant.common import ASM, decode, launch_triton, prefill, staged_smem, w4a8, w4a16
from radiance.kernels.nvidia.tile import Tile, fit, smem_limit
from radiance.kernels.registry import KernelSpec
from radiance.kernels.triton import paro_gemm, paro_rotate

NAME = "deq"
MODE = paro_rotate.PLAIN
W4A16_ONLY = False
WORDS = False
W4A16 = KernelSpec(f"paroquant.{NAME}", "cuda", prefill, None, w4a16)
W4A8 = KernelSpec(f"paroquant.{NAME}", "cuda", decode, (8, 0), w4a8)
smem = staged_smem


def decode_tile(m: int, n: int, groups: int, sms: int, cap: tuple[int, int], i8: bool = False) -> Tile:
    """deqt's rule (its docstring)."""
    return replace(deqt.decode_tile(m, n, groups, sms, cap, i8), kind=NAME)


def prefill_tile(cap: tuple[int, int], m: int = 2048) -> Tile:
    """128 x 256 (each dequantized weight tile serves twice the columns of 128 x 128), fitted to the card."""
    return fit(Tile(128, 256, 8, 3, 1, NAME), smem_limit(cap), smem, 2)


def launch(grid, args, t: Tile, has_bias: bool, programs: int, pdl: bool) -> None:
    launch_triton(paro_gemm._paro_deq_kernel, grid, args, t, has_bias, ASM=ASM)
