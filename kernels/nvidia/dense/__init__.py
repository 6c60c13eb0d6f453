"""Unquantized (skipped) linears on NVIDIA, one module per kernel kind: `skinny` (a split-K Triton GEMM
for few rows of a narrow projection, sm_80+) and `cublas` (torch's GEMM: every other row). The
("dense", "cuda") entry of kernels/methods/dense.py: `prepare` plans the layer's rows from `KERNELS`."""

from __future__ import annotations

import torch

from radiance.kernels import gpu, registry
from radiance.kernels.config import KernelConfig
from radiance.kernels.linear import PreparedLinear
from radiance.kernels.nvidia.dense import cublas, skinny

KINDS = {k.NAME: k for k in (skinny, cublas)}
KERNELS = registry.register([skinny.SPEC, cublas.SPEC])


def plan(weight: torch.Tensor, cap: tuple[int, int] | None = None, config: KernelConfig | None = None) -> registry.Plan:
    """The kernel plan of an unquantized linear on NVIDIA (CPU tensors: as an sm_80+ part)."""
    n, k = (int(d) for d in weight.shape)
    target = registry.Target.of("dense", "cuda", n, k, config or KernelConfig.from_knobs(),
                                cap or gpu.capability(weight.device) or (8, 0))
    return registry.choose(KERNELS, target)


def linear(x: torch.Tensor, weight: torch.Tensor, planned: registry.Plan, bias: torch.Tensor | None = None):
    """An unquantized linear on NVIDIA as planned."""
    return KINDS[planned.spec(x.shape[0]).kernel].linear(x, weight, bias)


def prepare(prep: PreparedLinear, weight: torch.Tensor) -> None:
    prep.data["w"] = weight.contiguous()
    prep.data["kernels"] = plan(weight, config=prep.config)  # type: ignore[assignment]


def forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return linear(x, prep.data["w"], prep.data["kernels"], bias)  # type: ignore[arg-type]
