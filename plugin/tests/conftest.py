"""Tiny real checkpoints (a 2-layer Qwen2 in the paroquant / pq2 formats) and an in-process vLLM
loader: vLLM's own EngineArgs -> VllmConfig -> get_model, the path a server takes to load weights,
in seconds instead of a server start."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import torch

from radiance.testing.tiny_model import (
    H, I, LAYERS, MXFP4_CFG, PARO_CFG, PQ2_CFG, dense_state, quantize_state, write_checkpoint,
)


@pytest.fixture(scope="session")
def tiny_dense() -> dict[str, torch.Tensor]:
    return dense_state()


@pytest.fixture(scope="session")
def vllm_dist():
    """vLLM's distributed state for one in-process rank (gloo), set up once per session."""
    from radiance.plugin import register

    register()
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(world_size=1, rank=0, local_rank=0,
                                     distributed_init_method=f"tcp://127.0.0.1:{port}", backend="gloo")
        initialize_model_parallel(1, 1)
    yield


def load_in_vllm(model_dir: Path, **engine_kw):
    """Build the VllmConfig a server would and load the model with vLLM's default loader."""
    from vllm.config import set_current_vllm_config
    from vllm.engine.arg_utils import EngineArgs
    from vllm.model_executor.model_loader import get_model
    from vllm.v1.worker.cpu import shm  # noqa: F401  (the CPU worker's torch.accelerator shims)

    kw = {"skip_tokenizer_init": True, "enforce_eager": True, "max_model_len": 256, **engine_kw}
    args = EngineArgs(model=str(model_dir), **kw)
    cfg = args.create_engine_config()
    with set_current_vllm_config(cfg):
        model = get_model(vllm_config=cfg)
    return model, cfg


@pytest.fixture(scope="session")
def tiny():
    """The helpers above, for test modules (conftest modules cannot be imported by name)."""
    import types

    return types.SimpleNamespace(
        LAYERS=LAYERS, H=H, I=I, PARO_CFG=PARO_CFG, PQ2_CFG=PQ2_CFG, MXFP4_CFG=MXFP4_CFG, dense_state=dense_state,
        quantize_state=quantize_state, write_checkpoint=write_checkpoint, load_in_vllm=load_in_vllm,
        hf_quantized_model=hf_quantized_model, hf_logprobs=hf_logprobs, set_attention=set_attention,
    )


class RefLinear(torch.nn.Module):
    """An nn.Linear replaced by radiance's exact reference on the checkpoint's quantized tensors."""

    def __init__(self, method: str, tensors, bias: torch.Tensor | None):
        super().__init__()
        self.method, self.t, self.bias = method, tensors, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from radiance.kernels import reference as R

        x2 = x.reshape(-1, x.shape[-1])
        fn = {"paroquant": R.paroquant_linear, "paroquant_mxfp4": R.paroquant_mxfp4_linear}.get(self.method, R.pq2_linear)
        y = fn(x2, self.t, self.bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])


def hf_quantized_model(model_dir: Path, dtype: torch.dtype = torch.bfloat16):
    """transformers' Qwen2 forward with every quantized linear computed from the checkpoint's own
    quantized tensors by radiance.kernels.reference (the same numbers the format defines)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from radiance.kernels.formats.paroquant import ParoTensors
    from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
    from radiance.kernels.formats.pq2 import Pq2Tensors

    cfg = AutoConfig.from_pretrained(model_dir)
    method = cfg.quantization_config["quant_method"]
    del cfg.quantization_config
    state: dict[str, torch.Tensor] = {}
    for shard in sorted(Path(model_dir).glob("*.safetensors")):
        state.update(load_file(str(shard)))
    model = AutoModelForCausalLM.from_config(cfg, torch_dtype=dtype)
    replaced = []
    for name, mod in list(model.named_modules()):
        if isinstance(mod, torch.nn.Linear) and (f"{name}.qweight" in state or f"{name}.weight_scale" in state):
            kind = {"paroquant": ParoTensors, "paroquant_mxfp4": Mxfp4Tensors}.get(method, Pq2Tensors)
            tensors = kind.from_state(state, name)
            bias = state.get(f"{name}.bias")
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent), child, RefLinear(method, tensors, bias))
            replaced.append(name)
    rest = {k: v for k, v in state.items() if not any(k.startswith(n + ".") for n in replaced)}
    missing, unexpected = model.load_state_dict(rest, strict=False)
    assert not unexpected, unexpected
    assert all(any(m.startswith(n + ".") for n in replaced) for m in missing), missing
    return model.eval()


@torch.no_grad()
def hf_logprobs(model, seqs: list[list[int]]) -> list[torch.Tensor]:
    """Per sequence, [len-1, vocab] fp32 log-probabilities of the next token after each prefix.

    One batched forward (each reference linear dequantizes its weights once per call): sequences
    are right-padded, which a causal model never attends to from the real positions."""
    longest = max(len(s) for s in seqs)
    batch = torch.tensor([s + [s[-1]] * (longest - len(s)) for s in seqs])
    logits = model(batch).logits.float()
    return [torch.log_softmax(logits[i, : len(s) - 1], dim=-1) for i, s in enumerate(seqs)]


def set_attention(model, impl: str) -> None:
    """Switch transformers' attention implementation ("sdpa" / "eager") on a built model."""
    for mod in model.modules():
        cfg = getattr(mod, "config", None)
        if cfg is not None and hasattr(cfg, "_attn_implementation"):
            cfg._attn_implementation = impl
