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


AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
# vLLM's kernel registry (choose_mp_linear_kernel) in its priority order on CUDA; disabling the ones
# ahead of a kernel is how a run forces it (VLLM_DISABLED_KERNELS, read at each choice)
VLLM_AHEAD = {"MacheteLinearKernel": "CutlassW4A8LinearKernel",
              "MarlinLinearKernel": "CutlassW4A8LinearKernel,MacheteLinearKernel,AllSparkLinearKernel"}


def vllm_awq_layer(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, kernel: str):
    """The linear vLLM's `awq_marlin` serves for these AWQ tensors (qweight [K, N/8] and qzeros
    [K/128, N/8] int32 in AWQ's nibble order, scales [K/128, N]: radiance's paroquant layout) on
    `kernel` (MacheteLinearKernel: vLLM's choice on sm_90; MarlinLinearKernel: gptq_marlin_gemm),
    through vLLM's own create_weights / process_weights_after_loading / apply. Returns x -> y."""
    import os

    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig, AutoAWQMarlinLinearMethod

    k, n = qweight.shape[0], scales.shape[1]
    os.environ["VLLM_DISABLED_KERNELS"] = VLLM_AHEAD[kernel]
    try:
        with set_current_vllm_config(VllmConfig()), torch.device("cuda"):
            method = AutoAWQMarlinLinearMethod(AutoAWQConfig.from_config(dict(AWQ_CONFIG)))
            layer = torch.nn.Module()
            method.create_weights(layer, k, [n], k, n, torch.bfloat16, weight_loader=lambda *a, **kw: None)
            layer.qweight.data.copy_(qweight)
            layer.qzeros.data.copy_(qzeros)
            layer.scales.data.copy_(scales.to(torch.bfloat16))
            method.process_weights_after_loading(layer)
    finally:
        os.environ.pop("VLLM_DISABLED_KERNELS", None)
    got = type(method.kernel).__name__
    if got != kernel:
        raise RuntimeError(f"vLLM chose {got} for an AWQ {n}x{k} layer, not {kernel}")
    return lambda x: method.apply(layer, x)
