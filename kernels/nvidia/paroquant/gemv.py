"""`gemv`: the decode GEMV on the CUDA cores in Triton (triton/paro_gemm.py `_paro_gemv_kernel`), one
row per program; W4A16. Rows 1..GEMV_MAX_M (1..TURING_GEMV_MAX_M on Turing): what M = 1 falls back
to where the Gluon kinds are disabled or cannot run (the interpreter). Reads ROT32P activations."""

from __future__ import annotations

from radiance.kernels.nvidia.paroquant.common import gemv_rows, launch_triton, split_decode, staged_smem, w4a16
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import KernelSpec
from radiance.kernels.triton import paro_gemm, paro_rotate

NAME = "gemv"
MODE = paro_rotate.ROT32P
W4A16_ONLY = True
WORDS = True
GEMV_MAX_M = 1
SPEC = KernelSpec(f"paroquant.{NAME}", "cuda", gemv_rows(GEMV_MAX_M), None, w4a16)


smem = staged_smem


def decode_tile(m: int, n: int, groups: int, sms: int, cap: tuple[int, int], i8: bool = False) -> Tile:
    # BN 16, 2 warps, 4 groups per load
    gpi = next(x for x in (4, 2, 1) if groups % x == 0)
    bn, warps, stages = (16, 2, 1) if n // 16 >= 4 * sms else (16, 2, 2) if groups <= 64 else (64, 4, 3)
    return split_decode(Tile(1, bn, warps, stages, 1, NAME, gpi), m, n, groups, sms, cap, 4, 16, smem)


prefill_tile = None


def launch(grid, args, t: Tile, has_bias: bool, programs: int, pdl: bool) -> None:
    if t.bm != 1:
        raise ValueError("paroquant gemv takes one row per program (bm=1)")
    launch_triton(paro_gemm._paro_gemv_kernel, grid, args, t, has_bias, GPI=t.gpi)
