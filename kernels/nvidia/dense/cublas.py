"""`cublas`: torch's GEMM (cuBLAS), every row of an unquantized linear the skinny kernel does not take.
Bit-identical to what vLLM's own unquantized method runs."""

from __future__ import annotations

import torch

from radiance.kernels.registry import ROWS_MAX, KernelSpec

NAME = "cublas"
SPEC = KernelSpec(f"dense.{NAME}", "cuda", lambda t: (1, ROWS_MAX), exact=True)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    return torch.nn.functional.linear(x, weight, bias)
