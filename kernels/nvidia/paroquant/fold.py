"""`fold`: W4A8's prefill GEMM in Triton (triton/paro_gemm.py `_paro_fold_kernel`): the transposed
MMA on (c - 8), activations scaled per (row, group) and the zero point folded per group; sm_80+
(int8 tensor-core dots). Reads I8G activations."""

from __future__ import annotations

from dataclasses import replace

from radiance.kernels.nvidia import tile
from radiance.kernels.nvidia.paroquant.common import ASM, launch_triton, prefill, staged_smem, w4a8
from radiance.kernels.nvidia.tile import Tile, fit, smem_limit
from radiance.kernels.registry import KernelSpec
from radiance.kernels.triton import paro_gemm, paro_rotate

NAME = "fold"
MODE = paro_rotate.F16G
W4A16_ONLY = False
WORDS = False
SPEC = KernelSpec(f"paroquant.{NAME}", "cuda", prefill, (8, 0), w4a8)
smem = staged_smem
decode_tile = None


def prefill_tile(cap: tuple[int, int], m: int = 2048) -> Tile:
    """128 x 64 on 2 stages; a card's tuned entry may cap its registers (tiles/<arch>.json: the
    H200's cap fits 3 programs per SM instead of 2; on sm_86 the same tile compiles to mma.sync with
    253 registers and capped it would spill (offline SASS), so cards without an entry keep the
    compiler's choice)."""
    found = tile.lookup(tile.arch(cap), "paroquant", NAME, None, None, "prefill")
    t = replace(found, kind=NAME) if found else Tile(128, 64, 4, 2, 1, NAME)
    return fit(t, smem_limit(cap), smem, 1)


def launch(grid, args, t: Tile, has_bias: bool, programs: int, pdl: bool) -> None:
    launch_triton(paro_gemm._paro_fold_kernel, grid, args, t, has_bias, ASM=ASM)
