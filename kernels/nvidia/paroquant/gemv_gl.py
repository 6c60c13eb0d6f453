"""`gemv_gl`: the decode GEMV on the CUDA cores in Gluon (triton/paro_gemv_gluon.py), all of a
program's rows (1, 2 or 4) sharing each decoded weight word; W4A16. Rows 1..GEMV_GL_MAX_M where
mma_gl does not take them, 1..TURING_GEMV_MAX_M on Turing. Reads ROT32P activations."""

from __future__ import annotations

from radiance.kernels.nvidia.paroquant.common import gemv_rows, gluon_w4a16, split_decode
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import KernelSpec
from radiance.kernels.triton import paro_rotate

NAME = "gemv_gl"
MODE = paro_rotate.ROT32P
W4A16_ONLY = True
WORDS = True
GEMV_GL_MAX_M = 2
SPEC = KernelSpec(f"paroquant.{NAME}", "cuda", gemv_rows(GEMV_GL_MAX_M), None, gluon_w4a16)


def smem(t: Tile, act_bytes: int = 2) -> int:
    return 1024  # everything in registers but the final cross-warp sum


def decode_tile(m: int, n: int, groups: int, sms: int, cap: tuple[int, int], i8: bool = False) -> Tile:
    # 2 columns x 4 words per thread on 4 warps, everything of the next group prefetched (stages 3),
    # ~12 programs per SM by split-K: one group per step keeps the most groups in flight. The rows of
    # a program share each decoded weight word (the decode is the cost on the CUDA cores). 4 rows x 4
    # columns per thread would take 251 registers on sm_75 (offline SASS): 2 columns, 128. The
    # constants are the H200 sweep's (bench/sweep_paro_decode.py; docs/perf.md).
    bm = m if m <= 2 else 4
    bn = 64 if bm == 4 else 128 if m > 1 or n // 64 >= 4 * sms else 64
    return split_decode(Tile(bm, bn, 4, 3 if m == 1 else 2, 1, NAME, 1), m, n, groups, sms, cap, 12, 8, smem)


prefill_tile = None


def launch(grid, args, t: Tile, has_bias: bool, programs: int, pdl: bool) -> None:
    from radiance.kernels.triton.paro_gemv_gluon import launch as run  # Gluon: imported only where it runs

    if t.maxnreg:
        raise ValueError(f"paroquant {NAME}: no register cap (maxnreg={t.maxnreg}); it is for the Triton kinds")
    run(NAME, grid, args, bm=t.bm, bn=t.bn, gpi=t.gpi, num_warps=t.warps, num_stages=t.stages, has_bias=has_bias)
