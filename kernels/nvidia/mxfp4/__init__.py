"""paroquant_mxfp4 (MXFP4-PARO) on NVIDIA, one module per GEMM kind: `deqt` (the decode band,
split-K) and `deq` (above it). Both run triton/mxfp4_gemm.py's kernel after paroquant's rotation
prologue (PLAIN fp16 for W4A16; ROT32 then mxfp4_gemm.quant_fp8 for W4A8); mxfp4_ops prepares the
layer and plans its rows from `KERNELS`."""

from __future__ import annotations

from radiance.kernels.nvidia.mxfp4 import deq, deqt
from radiance.kernels.nvidia.mxfp4.common import fit_tile, smem  # noqa: F401 -- the tests' names
from radiance.kernels.registry import register

KINDS = {k.NAME: k for k in (deqt, deq)}
KERNELS = register([deqt.SPEC, deq.SPEC])  # priority order: the split-K GEMM in the decode band, the tiled one above
