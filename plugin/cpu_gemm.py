"""The CPU fast paths (kernels/cpu_folded.py) on vLLM's own CPU GEMMs: the folded weight on what vLLM
runs for an unquantized linear (oneDNN on prepacked weights, or its small-GEMM kernel; torch's
F.linear on the same bf16 weight measured about half its speed on the 2-core machine), and the int4
codes of each run of output columns on vLLM's CPU int4 GEMM (plugin/vllm_int4.py)."""

from __future__ import annotations

import torch
from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

from radiance.kernels import cpu_folded, ops
from radiance.plugin.vllm_int4 import awq_linear


def use_vllm_gemm(layer: torch.nn.Module, prep: ops.PreparedLinear) -> None:
    """If `prep` is on a CPU fast path, give it vLLM's CPU GEMMs in the layer's dtype."""
    if prep.platform != "cpu":
        return
    if "rot0" in prep.data:
        _int4_runs(layer, prep)
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


def _int4_runs(layer: torch.nn.Module, prep: ops.PreparedLinear) -> None:
    qw, qz, sc = (prep.data.pop(name) for name in cpu_folded.ROTATED_TENSORS)
    for run in prep.runs:
        fn, _ = awq_linear(qw[:, run.n0 // 8:run.n1 // 8], qz[:, run.n0 // 8:run.n1 // 8], sc[:, run.n0:run.n1],
                           layer.params_dtype)
        prep.run_gemms.append(fn)
