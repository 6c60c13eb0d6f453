"""The one custom op every radiance linear runs through: `torch.ops.vllm.radiance_linear`.

Dispatch by row count (decode / prefill band) happens inside the op, so torch.compile traces one
opaque call and never specializes on the token count. The op finds its layer by a string key
(custom ops take no modules); the layer carries the prepared weights and its CHECKALL hook.
"""

import logging
import time
from typing import Optional

import torch
from torch import nn
from vllm.distributed import tensor_model_parallel_all_gather
from vllm.model_executor.layers.linear import RowParallelLinear
from vllm.utils.torch_utils import direct_register_custom_op

from radiance.kernels import cpu_folded, ops, warmup

log = logging.getLogger("radiance.plugin")
OP_NAME = "radiance_linear"
_LAYERS: dict[str, nn.Module] = {}


def declare(layer: nn.Module, prefix: str, out_features: int, gather: bool = False, rank: int = 0) -> None:
    """Give `layer` its op key at create_weights time (the fake impl needs out_features early).

    gather: the input is all-gathered over TP ranks and rank 0 computes the whole output (the
    others return zeros, so the row-parallel all-reduce yields exactly the TP=1 result)."""
    key, n = prefix or "linear", 1
    while key in _LAYERS and _LAYERS[key] is not layer:
        n += 1
        key = f"{prefix}#{n}"
    _LAYERS[key] = layer
    layer._radiance_key = key
    layer._radiance_out = out_features
    layer._radiance_gather = gather
    layer._radiance_rank = rank
    layer._radiance_prep = None
    layer._radiance_check = None
    layer._radiance_direct = None


def attach(layer: nn.Module, prep: ops.PreparedLinear, check=None) -> None:
    """Give `layer` its prepared weights (and CHECKALL hook), and warm its kernels if no layer of
    the same shape has been: every Triton compile must happen before vLLM serves (kernels/warmup.py)."""
    if prep.out_features != layer._radiance_out:
        raise ValueError(f"{layer._radiance_key}: prepared {prep.out_features} outputs, layer has {layer._radiance_out}")
    layer._radiance_prep = prep
    layer._radiance_check = check
    # CPU, folded: the layer is one vLLM GEMM, called as vLLM calls its own (no op, nothing to judge or gather)
    layer._radiance_direct = cpu_folded.direct_gemm(prep) if check is None and not layer._radiance_gather else None
    spec = warmup.pending(prep, call_bias(layer), layer.params_dtype)
    if spec is not None:
        before, t0 = warmup.cache_entries(), time.monotonic()
        device = next(layer.parameters()).device
        warmup.warm(prep, spec, device)
        torch.cuda.empty_cache()  # the warm-up's activations: vLLM sizes its KV cache from what is left
        compiled = warmup.cache_entries() - before
        log.info("kernels: %s (%s) warmed at %d row counts in %.1f s; %d compiled here%s", layer._radiance_key, spec,
                 len(warmup.warm_rows()), time.monotonic() - t0, compiled,
                 " (the launcher's warm-up had not built them)" if compiled else "")


def layer_of(key: str) -> nn.Module:
    """The layer a graph's op key names (declared at create_weights)."""
    found = _LAYERS.get(key)
    if found is None:
        raise KeyError(f"radiance: no linear declared under the op key {key!r}")
    return found


def call_bias(layer: nn.Module) -> torch.Tensor | None:
    """The bias vLLM hands apply(): none where it adds the bias itself, and none on the ranks > 0 of
    a row-parallel layer (the bias joins once, on rank 0, before the all-reduce)."""
    bias = getattr(layer, "bias", None)
    if bias is None or getattr(layer, "skip_bias_add", False):
        return None
    if isinstance(layer, RowParallelLinear) and getattr(layer, "tp_rank", 0) > 0:
        return None
    return bias


def _impl(x: torch.Tensor, bias: Optional[torch.Tensor], key: str) -> torch.Tensor:
    layer = _LAYERS[key]
    if layer._radiance_gather:
        x = tensor_model_parallel_all_gather(x.contiguous(), dim=-1)
        if layer._radiance_rank != 0:
            return x.new_zeros(x.shape[0], layer._radiance_out)
    prep = layer._radiance_prep
    if prep is None:
        raise RuntimeError(f"{key}: weights were never prepared (process_weights_after_loading did not run)")
    y = ops.linear_forward(prep, x, bias)
    if layer._radiance_check is not None:
        layer._radiance_check(x, y, bias)
    return y


def _fake(x: torch.Tensor, bias: Optional[torch.Tensor], key: str) -> torch.Tensor:
    return x.new_empty((x.shape[0], _LAYERS[key]._radiance_out))


def register_op() -> None:
    if hasattr(torch.ops.vllm, OP_NAME):
        return
    direct_register_custom_op(op_name=OP_NAME, op_func=_impl, mutates_args=[], fake_impl=_fake)


def apply(layer: nn.Module, x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    if layer._radiance_direct is not None:
        return layer._radiance_direct(x, bias)
    lead = x.shape[:-1]
    y = torch.ops.vllm.radiance_linear(x.reshape(-1, x.shape[-1]), bias, layer._radiance_key)
    return y.reshape(*lead, y.shape[-1])
