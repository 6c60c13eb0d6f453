"""`scratch`: the weight dequantized to an fp16 scratch, then cuBLAS (triton/paro_scratch.py), W4A16:
every row above the decode band but wgmma's -- with enough rows cuBLAS' GEMM outruns any fused
Triton tile, and the dequant's cost is amortized (docs/perf.md: the prefill rows on the H200); below
Ampere the fused tile that fits 64 KB is too small for the tensor cores -- and on Turing the decode
rows above TURING_GEMV_MAX_M too (Triton's dots have no tensor cores there). It reads the activations
themselves (its own prologue), so it has its own forward and no tile."""

from __future__ import annotations

import torch

from radiance.kernels.nvidia import pool
from radiance.kernels.nvidia.paroquant.common import TURING_GEMV_MAX_M, turing, w4a16
from radiance.kernels.registry import ROWS_MAX, KernelSpec, Target
from radiance.kernels.triton import paro_scratch

NAME = "scratch"
MODE = None  # reads x itself
W4A16_ONLY = True
WORDS = False
decode_tile = prefill_tile = smem = launch = None


def _rows(t: Target) -> tuple[int, int]:
    return (min(t.decode_max_m, TURING_GEMV_MAX_M) if turing(t) else t.decode_max_m) + 1, ROWS_MAX


SPEC = KernelSpec(f"paroquant.{NAME}", "cuda", _rows, None, w4a16)


def deq_elems(n: int, k: int, rows: int, device: torch.device) -> int:
    """fp16 elements its scratch holds (pieces of `rows` weight rows on a side stream, created here,
    outside any graph capture: RADIANCE_PQ_SCRATCH_ROWS; 0 = the whole weight)."""
    if rows and device.type == "cuda":
        paro_scratch.side_stream(device)
    return paro_scratch.scratch_elems(n, k, rows)


def forward(layer, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return paro_scratch.forward(layer, x, bias, pool.get(x.device, "paroquant").deq)
