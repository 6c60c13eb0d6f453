"""The CPU fast paths (kernels/cpu_folded.py) on vLLM's own CPU GEMMs: the folded weight on what vLLM
runs for an unquantized linear, and the int4 codes of each run of output columns on vLLM's CPU int4
GEMM (plugin/vllm_int4.py).

vLLM's CPU dispatch (`dispatch_cpu_unquantized_gemm`) picks one of four branches by the host: zentorch
on AMD Zen with zentorch installed, its small-GEMM kernel for small weights on AMX CPUs, oneDNN on a
prepacked weight, and torch's F.linear where oneDNN cannot build the matmul (bf16 on a CPU without
AVX-512: most desktops). The first three hold a packed copy and ignore the weight argument; the
fallback reads it. So the folded GEMM is called exactly as vLLM calls its own layers: with the
weight vLLM left on the holder (the real one for the fallback, an empty one otherwise).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

from radiance.kernels import cpu_folded, ops
from radiance.plugin.vllm_int4 import awq_linear

# the op each of vLLM's branches calls -> the branch's name in logs (tests force each branch)
BRANCHES = {"zentorch_linear_unary": "zentorch", "weight_packed_linear_cpu": "small-gemm",
            "onednn_mm": "onednn", "linear": "torch"}


def vllm_gemm(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[Callable, str]:
    """(x, bias) -> x @ weight.T + bias on the GEMM vLLM's CPU dispatch picks for `weight` on this
    host, and that branch's name. vLLM may convert `bias` in place for its kernel (fp32 for the
    small-GEMM one), as it does for its own layers."""
    holder = torch.nn.Module()
    holder.weight = torch.nn.Parameter(weight, requires_grad=False)
    holder.bias = bias
    dispatch_cpu_unquantized_gemm(holder, remove_weight=True)
    linear, kept = holder.cpu_linear, holder.weight
    return (lambda x, b: linear(x, kept, b)), branch_of(linear)


def branch_of(cpu_linear: Callable) -> str:
    """Which of vLLM's branches built `cpu_linear` (by the op its lambda calls)."""
    names = set(getattr(getattr(cpu_linear, "__code__", None), "co_names", ()))
    found = [label for op, label in BRANCHES.items() if op in names]
    if len(found) != 1:
        raise RuntimeError(f"radiance: cannot tell which CPU GEMM vLLM picked (its dispatch calls {sorted(names)}); "
                           "this vLLM's dispatch_cpu_unquantized_gemm has a branch radiance does not know")
    return found[0]


def use_vllm_gemm(layer: torch.nn.Module, prep: ops.PreparedLinear) -> str | None:
    """If `prep` is on a CPU fast path, give it vLLM's CPU GEMMs in the layer's dtype; the path's name."""
    if prep.platform != "cpu":
        return None
    if "rot0" in prep.data:
        return _int4_runs(layer, prep)
    weight = cpu_folded.gemm_weight(prep, layer.params_dtype)
    if weight is None:
        return None
    prep.gemm, branch = vllm_gemm(weight, getattr(layer, "bias", None))
    return branch


def _int4_runs(layer: torch.nn.Module, prep: ops.PreparedLinear) -> str:
    qw, qz, sc = (prep.data.pop(name) for name in cpu_folded.ROTATED_TENSORS)
    kernel = ""
    for run in prep.runs:
        fn, kernel = awq_linear(qw[:, run.n0 // 8:run.n1 // 8], qz[:, run.n0 // 8:run.n1 // 8], sc[:, run.n0:run.n1],
                                layer.params_dtype)
        _probe(fn, kernel, prep.in_features, layer.params_dtype)
        prep.run_gemms.append(fn)
    return kernel


def _probe(fn: Callable, kernel: str, k: int, dtype: torch.dtype) -> None:
    """One call at load: vLLM picks its CPU int4 kernel without asking whether this build of its kernel
    library has it (its AVX2 build has none), which would otherwise fail at the first request."""
    try:
        fn(torch.randn(1, k, dtype=dtype))
    except (AttributeError, RuntimeError, NotImplementedError) as e:
        raise RuntimeError(f"RADIANCE_CPU_WEIGHTS=int4: vLLM's CPU int4 GEMM ({kernel}) cannot run "
                           f"{str(dtype).removeprefix('torch.')} activations on this CPU with this vLLM build ({type(e).__name__}: {str(e).splitlines()[0]}); serve "
                           "RADIANCE_CPU_WEIGHTS=folded (the default)") from None
