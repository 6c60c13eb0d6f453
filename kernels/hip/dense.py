"""The ("dense", "rocm") entry of kernels/methods/dense.py: an unquantized (skipped) linear on
gfx1201. No skinny HIP kernel yet: the platform BLAS, as vLLM's own unquantized method runs it."""

from __future__ import annotations

import torch

from radiance.kernels.hip import kernels
from radiance.kernels.hip.paroquant import plan
from radiance.kernels.linear import PreparedLinear


def prepare(prep: PreparedLinear, weight: torch.Tensor) -> None:
    plan(prep, kernels.DENSE)  # one kernel on every row; RADIANCE_DISABLED_KERNELS=dense.hipblas refuses the layer
    prep.data["w"] = weight.contiguous()


def forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(x, prep.data["w"], bias)
