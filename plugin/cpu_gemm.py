"""The CPU folded path on vLLM's own CPU GEMM: what vLLM runs for an unquantized linear (oneDNN on
prepacked weights, or its small-GEMM kernel), handed the folded weight (kernels/cpu_folded.py).
torch's F.linear on the same bf16 weight measured about half its speed on the 2-core machine."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

from radiance.kernels import cpu_folded, ops


def use_vllm_gemm(layer: torch.nn.Module, prep: ops.PreparedLinear) -> None:
    """If `prep` is on the CPU folded path, give it vLLM's CPU GEMM over its weight in the layer's dtype."""
    if prep.platform != "cpu":
        return
    weight = cpu_folded.folded_weight(prep, layer.params_dtype)
    if weight is None:
        return
    holder = torch.nn.Module()
    holder.weight = torch.nn.Parameter(weight, requires_grad=False)
    # vLLM may convert the bias for its kernel (fp32 for the small-GEMM one), as it does for its own layers
    holder.bias = getattr(layer, "bias", None)
    dispatch_cpu_unquantized_gemm(holder, remove_weight=True)
    linear = holder.cpu_linear
    prep.gemm = lambda x, bias: linear(x, None, bias)
