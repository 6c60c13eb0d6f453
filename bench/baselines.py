"""Third-party baselines the kernel benchmarks time beside radiance: gemlite's A16Wn / A8Wn layers
(gemlite 0.6.0.post2, carried as a wheel; its shipped h100.json configs, autotune off)."""

from __future__ import annotations

import torch


def gemlite_layer(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, nbits: int, a8: bool):
    """A gemlite layer for codes [N, K] (uint8, 0..2^nbits-1), per-128-group scales and zero
    points [N, K/128]; a8 = int8 dynamic activations (A8Wn), else bf16 (A16Wn)."""
    from gemlite.helper import A8Wn_HQQ_INT_dynamic, A16Wn

    sc, zp = scales.to(torch.bfloat16), zeros.to(torch.bfloat16)
    if a8:
        return A8Wn_HQQ_INT_dynamic(device="cuda", dtype=torch.bfloat16, W_nbits=nbits).from_weights(codes, sc, zp)
    return A16Wn(device="cuda", dtype=torch.bfloat16).from_weights(codes, sc, zp, W_nbits=nbits, group_size=128)


# vLLM's kernel registry (choose_mp_linear_kernel) in its priority order on CUDA; disabling the ones
# ahead of a kernel is how a run forces it (VLLM_DISABLED_KERNELS, read at each choice)
VLLM_AHEAD = {"MacheteLinearKernel": "CutlassW4A8LinearKernel",
              "MarlinLinearKernel": "CutlassW4A8LinearKernel,MacheteLinearKernel,AllSparkLinearKernel"}


def vllm_awq_layer(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, kernel: str):
    """x -> y on vLLM's AWQ linear for these tensors (radiance's paroquant layout) on `kernel`
    (MacheteLinearKernel: vLLM's choice on sm_90; MarlinLinearKernel: gptq_marlin_gemm)."""
    from radiance.plugin.vllm_int4 import awq_linear, single_rank

    single_rank()
    fn, got = awq_linear(qweight, qzeros, scales, torch.bfloat16, disabled_kernels=VLLM_AHEAD[kernel])
    if got != kernel:
        raise RuntimeError(f"vLLM chose {got} for an AWQ {scales.shape[1]}x{qweight.shape[0]} layer, not {kernel}")
    return fn
