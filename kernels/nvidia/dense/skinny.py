"""`skinny`: a split-K Triton GEMM (triton/pq2_skinny.py) for few rows of a narrow unquantized
projection, where a GEMM library's small-M choice is poor; sm_80+ (below, Triton lowers its dot to
FMA and the tile spills ~300 bytes of registers per thread: kernels/tests/test_offline_compile.py,
sm_75). cuBLAS does the rest well."""

from __future__ import annotations

from dataclasses import replace

import torch
import triton

from radiance.kernels import gpu
from radiance.kernels.launch import Launch
from radiance.kernels.nvidia.pq2.common import REDUCE_BLOCK
from radiance.kernels.nvidia.tile import Tile
from radiance.kernels.registry import KernelSpec, Target
from radiance.kernels.triton.pq2_common import reduce_splits
from radiance.kernels.triton.pq2_skinny import skinny_splitk_gemm

NAME = "skinny"
SKINNY_MAX_M = 16
SKINNY_MAX_N = 256
TILE = Tile(bm=16, bn=32, warps=4, stages=2, kind=NAME, bk=128, ksplit=256)


def _fits(t: Target) -> str | None:
    return None if t.n <= SKINNY_MAX_N and t.k % 128 == 0 else f"N <= {SKINNY_MAX_N} and K a multiple of 128 only"


SPEC = KernelSpec(f"dense.{NAME}", "cuda", lambda t: (1, SKINNY_MAX_M), (8, 0), _fits)
_PLANS: dict = {}


def tile(**fields) -> Tile:
    """Its tile with these fields changed (the tuner's candidates)."""
    return replace(TILE, **fields)


def applies(m: int, n: int, k: int) -> bool:
    """The split-K GEMM only for few rows of a narrow projection; cuBLAS does the rest well."""
    return m <= SKINNY_MAX_M and n <= SKINNY_MAX_N and k % 128 == 0


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, tile: Tile | None = None,
           force: bool = False) -> torch.Tensor:
    """y = x W^T (+ bias): the split-K GEMM where it applies (few rows, narrow N), else torch's
    matmul (cuBLAS on NVIDIA). `tile` / `force`: that tile / the kernel whatever the shape (tuners)."""
    k = x.shape[-1]
    n = weight.shape[0]
    lead = x.shape[:-1]
    x2 = x.reshape(-1, k)
    m = x2.shape[0]
    if force and m > SKINNY_MAX_M:
        raise ValueError(f"the skinny GEMM covers at most {SKINNY_MAX_M} rows, got M={m}")
    if not (force or applies(m, n, k)) or m == 0:
        y = x2 @ weight.t()
    else:
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        if not weight.is_contiguous():
            raise ValueError("skinny_linear needs a contiguous [N, K] weight (prepare it once after loading)")
        tile = tile or TILE
        splits = triton.cdiv(k, tile.ksplit)
        p = torch.empty((splits, m, n), dtype=torch.float32, device=x.device)
        y = torch.empty((m, n), dtype=x.dtype, device=x.device)
        # per device and arch: a plan holds the kernel loaded for the GPU it first ran on
        key = (tile, n, k, x.dtype, x.device, gpu.arch(x.device), x2.data_ptr() % 16 == 0, x2.stride(0) % 16 == 0,
               weight.data_ptr() % 16 == 0)
        launch = _PLANS.get(key)
        if launch is None:
            launch = _PLANS[key] = Launch(skinny_splitk_gemm, {"BM": tile.bm, "BN": tile.bn, "BK": tile.bk,
                                                               "KSPLIT": tile.ksplit}, tile.warps, tile.stages)
        launch((triton.cdiv(n, tile.bn), splits), x2, weight, p, m, n, k, x2.stride(0))
        rkey = ("reduce", splits, x.dtype, x.device, gpu.arch(x.device))
        red = _PLANS.get(rkey)
        if red is None:
            red = _PLANS[rkey] = Launch(reduce_splits, {"SPLITS": splits, "BLOCK": REDUCE_BLOCK}, 4, 1)
        red((triton.cdiv(m * n, REDUCE_BLOCK),), p, y, m * n)
    if bias is not None:
        y = y + bias
    return y.reshape(*lead, n)
