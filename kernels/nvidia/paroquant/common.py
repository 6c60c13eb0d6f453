"""What the paroquant kinds share: the checks on the activation type and the interpreter, the
decode / prefill bands, Turing's limits, the split-K rule of the decode tiles, and the launch of
the plain Triton kinds (triton/paro_gemm.py)."""

from __future__ import annotations

from dataclasses import replace

import torch
import triton

from radiance.kernels.formats.paroquant import GROUP_SIZE
from radiance.kernels.nvidia.tile import Tile, fit, smem_limit
from radiance.kernels.registry import ROWS_MAX, Target
from radiance.kernels.triton.paro_gemm import INTERPRET

# Below Ampere Triton 3.6 lowers tl.dot to FMA (no tensor cores; offline SASS for sm_75: the deq /
# deqt / fold tiles spill 300-3700 bytes per thread), so Turing keeps every decode row on the Gluon
# GEMV (4 rows per program, no spills) up to this M, and above it dequantizes to the scratch for
# cuBLAS as its prefill does. 8 = two row blocks, each re-reading the weights: estimated from an
# RTX 2060's bandwidth and FMA rate against the scratch path's 5x weight traffic, not measured.
TURING_GEMV_MAX_M = 8


def w4a16(t: Target) -> str | None:
    return "W4A16 only (RADIANCE_PQ_I8=1 asks for W4A8)" if t.i8 else None


def w4a8(t: Target) -> str | None:
    return None if t.i8 else "W4A8 only (RADIANCE_PQ_I8=1)"


def gluon_w4a16(t: Target) -> str | None:
    return "Gluon: not under the Triton interpreter" if t.interpret else w4a16(t)


def decode(t: Target) -> tuple[int, int]:
    return 1, t.decode_max_m


def prefill(t: Target) -> tuple[int, int]:
    return t.decode_max_m + 1, ROWS_MAX


def turing(t: Target) -> bool:
    return (t.cap or (9, 0)) < (8, 0)  # no capability: the interpreter, tiles as on the H200


def gemv_rows(most: int):
    """A CUDA-core GEMV's rows: 1..most, and on Turing every decode row up to TURING_GEMV_MAX_M."""
    return lambda t: (1, TURING_GEMV_MAX_M if turing(t) else most)


def split_decode(t: Tile, m: int, n: int, groups: int, sms: int, cap: tuple[int, int], per_sm: int, most: int,
                 smem) -> Tile:
    """A decode tile split along K to ~per_sm programs per SM (at most `most` ways, >= 2 groups per
    program), fitted to the card's shared memory below sm_90."""
    tiles = triton.cdiv(m, t.bm) * triton.cdiv(n, t.bn)
    t = replace(t, split=max(1, min(groups // 2, triton.cdiv(per_sm * sms, tiles), most)))
    return fit(t, smem_limit(cap), smem) if cap < (9, 0) else t


def staged_smem(t: Tile, act_bytes: int = 2) -> int:
    """Shared memory a Triton kind asks for: pipelined weight + activation tiles per stage, plus the
    dequantized weight operand staged once."""
    return t.stages * (t.bn * 64 + t.bm * GROUP_SIZE * act_bytes) + t.bn * GROUP_SIZE * act_bytes


def launch_triton(kernel, grid, args, t: Tile, has_bias: bool, **extra) -> None:
    """A plain Triton kind (deq, deqt, fold, gemv): BM x BN programs over args (the GEMM's common
    tuple), A_INT8 from the activations' dtype, the register cap where the tile has one."""
    if t.maxnreg:
        extra["maxnreg"] = t.maxnreg
    kernel[grid](*args, BM=t.bm, BN=t.bn, A_INT8=args[0].dtype == torch.int8, NS=t.stages, HAS_BIAS=has_bias,
                 num_warps=t.warps, num_stages=t.stages, **extra)


ASM = not INTERPRET  # every tensor-core kind unpacks its weights in PTX (the interpreter spells it out)
