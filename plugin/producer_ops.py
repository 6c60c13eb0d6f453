"""The fused sites' custom ops, which plugin/producer_pass.py puts in a compiled graph in place of a
(norm or silu-mul, radiance linear) pair:

- `torch.ops.vllm.radiance_add_rms_norm_linear(x, residual, weight, eps, bias, key) -> (y, residual_out)`
- `torch.ops.vllm.radiance_rms_norm_linear(x, weight, eps, bias, key) -> y`
- `torch.ops.vllm.radiance_silu_mul_linear(gu, bias, key) -> y`

Each runs `ops.produced_forward` on the layer its key names (plugin/custom_op.py): one producer
kernel writing the rotated activations, then the GEMM, in the decode band; the unfused ops above it.
"""

from __future__ import annotations

from typing import Optional

import torch
from vllm.utils.torch_utils import direct_register_custom_op

from radiance.kernels import ops
from radiance.kernels.producers import AddRmsNorm, Producer, SiluMul
from radiance.plugin import custom_op


def _run(producer: Producer, bias: Optional[torch.Tensor], key: str) -> torch.Tensor:
    prep = custom_op.layer_of(key)._radiance_prep
    if prep is None:
        raise RuntimeError(f"{key}: weights were never prepared (process_weights_after_loading did not run)")
    return ops.produced_forward(prep, producer, bias)


def _rows(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def add_rms_norm_linear(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float,
                        bias: Optional[torch.Tensor], key: str) -> tuple[torch.Tensor, torch.Tensor]:
    p = AddRmsNorm(_rows(x), _rows(residual), weight, eps)
    y = _run(p, bias, key)
    return y, p.residual_out


def rms_norm_linear(x: torch.Tensor, weight: torch.Tensor, eps: float, bias: Optional[torch.Tensor],
                    key: str) -> torch.Tensor:
    return _run(AddRmsNorm(_rows(x), None, weight, eps), bias, key)


def silu_mul_linear(gu: torch.Tensor, bias: Optional[torch.Tensor], key: str) -> torch.Tensor:
    return _run(SiluMul(_rows(gu)), bias, key)


def _out(x: torch.Tensor, key: str) -> torch.Tensor:
    return x.new_empty((x.shape[0], custom_op.layer_of(key)._radiance_out))


def _add_rms_norm_linear_fake(x, residual, weight, eps, bias, key):
    return _out(x, key), x.new_empty(x.shape)  # contiguous, as every path returns it


def _rms_norm_linear_fake(x, weight, eps, bias, key):
    return _out(x, key)


def _silu_mul_linear_fake(gu, bias, key):
    return _out(gu, key)


OPS = {
    "radiance_add_rms_norm_linear": (add_rms_norm_linear, _add_rms_norm_linear_fake),
    "radiance_rms_norm_linear": (rms_norm_linear, _rms_norm_linear_fake),
    "radiance_silu_mul_linear": (silu_mul_linear, _silu_mul_linear_fake),
}


def register_ops() -> None:
    for name, (impl, fake) in OPS.items():
        if not hasattr(torch.ops.vllm, name):
            direct_register_custom_op(op_name=name, op_func=impl, mutates_args=[], fake_impl=fake)
