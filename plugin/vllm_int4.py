"""vLLM's own int4 AWQ linear for radiance's paroquant codes (the same qweight [K, N/8] / qzeros
[K/128, N/8] int32 in AWQ's nibble order and scales [K/128, N]): built through vLLM's AWQ linear
method -- its create_weights, process_weights_after_loading and apply -- so it runs whichever
kernel vLLM's registry picks (CPUWNA16 on CPU; Machete or Marlin on NVIDIA). Used by the CPU
memory-saving path (RADIANCE_CPU_WEIGHTS=int4) and by the kernel benchmark's baselines."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from vllm.config import VllmConfig, get_current_vllm_config_or_none, set_current_vllm_config
from vllm.model_executor.layers.quantization.auto_awq import AutoAWQConfig, AutoAWQMarlinLinearMethod

AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def single_rank() -> None:
    """vLLM's tensor-parallel state for a script that is not a vLLM worker (its parameters read
    their rank at construction): one rank, set up once per process."""
    import socket

    from vllm.distributed import init_distributed_environment, initialize_model_parallel, parallel_state

    if parallel_state._TP is not None:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                     distributed_init_method=f"tcp://127.0.0.1:{port}")
        initialize_model_parallel(1, 1)


def awq_linear(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype,
               disabled_kernels: str = "") -> tuple[Callable, str]:
    """(x, bias) -> y on vLLM's AWQ kernel for these tensors (on their device), and the kernel's name.
    disabled_kernels: VLLM_DISABLED_KERNELS for this choice (how a benchmark forces a kernel)."""
    k, n = qweight.shape[0], scales.shape[1]
    saved = os.environ.get("VLLM_DISABLED_KERNELS")
    os.environ["VLLM_DISABLED_KERNELS"] = disabled_kernels
    try:
        with set_current_vllm_config(get_current_vllm_config_or_none() or VllmConfig()), torch.device(qweight.device):
            method = AutoAWQMarlinLinearMethod(AutoAWQConfig.from_config(dict(AWQ_CONFIG)))
            layer = torch.nn.Module()
            method.create_weights(layer, k, [n], k, n, dtype, weight_loader=lambda *a, **kw: None)
            layer.qweight.data.copy_(qweight)
            layer.qzeros.data.copy_(qzeros)
            layer.scales.data.copy_(scales.to(dtype))
            layer.bias = None
            method.process_weights_after_loading(layer)
    finally:
        if saved is None:
            os.environ.pop("VLLM_DISABLED_KERNELS", None)
        else:
            os.environ["VLLM_DISABLED_KERNELS"] = saved
    return (lambda x, bias=None: method.apply(layer, x, bias)), type(method.kernel).__name__
