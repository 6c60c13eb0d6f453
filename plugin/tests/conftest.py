"""Tiny real checkpoints (a 2-layer Qwen2 in the paroquant / pq2 formats) and an in-process vLLM
loader: vLLM's own EngineArgs -> VllmConfig -> get_model, the path a server takes to load weights,
in seconds instead of a server start."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from radiance.quantize import rtn

H, I, HEADS, KV, VOCAB, LAYERS = 256, 512, 4, 2, 512, 2
HEAD_DIM = H // HEADS


def tiny_config(quant: dict) -> dict:
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": H,
        "intermediate_size": I, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
        "num_key_value_heads": KV, "vocab_size": VOCAB, "max_position_embeddings": 512,
        "max_window_layers": LAYERS, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False,
        "quantization_config": quant,
    }


def _linears(layer: int) -> dict[str, tuple[int, int]]:
    p = f"model.layers.{layer}"
    return {
        f"{p}.self_attn.q_proj": (H, H), f"{p}.self_attn.k_proj": (KV * HEAD_DIM, H),
        f"{p}.self_attn.v_proj": (KV * HEAD_DIM, H), f"{p}.self_attn.o_proj": (H, H),
        f"{p}.mlp.gate_proj": (I, H), f"{p}.mlp.up_proj": (I, H), f"{p}.mlp.down_proj": (H, I),
    }


def dense_state(seed: int = 0) -> dict[str, torch.Tensor]:
    """A random tiny Qwen2 in bf16 (HF names)."""
    gen = torch.Generator().manual_seed(seed)
    sd = {"model.embed_tokens.weight": torch.randn(VOCAB, H, generator=gen) * 0.5,
          "model.norm.weight": torch.ones(H), "lm_head.weight": torch.randn(VOCAB, H, generator=gen) * 0.06}
    for i in range(LAYERS):
        sd[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(H)
        sd[f"model.layers.{i}.post_attention_layernorm.weight"] = torch.ones(H)
        for name, (n, k) in _linears(i).items():
            sd[f"{name}.weight"] = torch.randn(n, k, generator=gen) / k**0.5
            if name.endswith(("q_proj", "k_proj", "v_proj")):
                sd[f"{name}.bias"] = torch.randn(n, generator=gen) * 0.1
    return {k: v.to(torch.bfloat16) for k, v in sd.items()}


def quantize_state(dense: dict[str, torch.Tensor], method: str, krot: int = 4, shared_qkv: bool = True,
                   seed: int = 1) -> dict[str, torch.Tensor]:
    """Replace every linear's weight by `method` tensors. shared_qkv: q/k/v (and gate/up) share
    one rotation, as when a quantizer rotates the common input once (exercises the dedup)."""
    gen = torch.Generator().manual_seed(seed)
    out = {k: v for k, v in dense.items() if not any(k == f"{n}.weight" for i in range(LAYERS) for n in _linears(i))}
    for i in range(LAYERS):
        shared: dict[str, tuple] = {}
        for name, (n, k) in _linears(i).items():
            w = dense[f"{name}.weight"].float()
            if method == "pq2":
                out.update(rtn.pq2_linear_tensors(w).to_state(name))
                continue
            group = "qkv" if name.endswith(("q_proj", "k_proj", "v_proj")) else "gu" if name.endswith(
                ("gate_proj", "up_proj")) else name
            if group not in shared or not shared_qkv:
                pairs, theta = rtn.random_rotation(k, krot, gen)
                shared[group] = (pairs, theta, (torch.rand(1, k, generator=gen) + 0.5).half())
            out.update(rtn.paroquant_linear_tensors(w, *shared[group]).to_state(name))
    return out


def write_checkpoint(path: Path, state: dict[str, torch.Tensor], quant: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(tiny_config(quant), indent=1))
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(path / "model.safetensors"))
    return path


PARO_CFG = {"quant_method": "paroquant", "bits": 4, "group_size": 128, "krot": 4}
PQ2_CFG = {"quant_method": "pq2", "bits": 2, "group_size": 128}


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
        LAYERS=LAYERS, H=H, I=I, PARO_CFG=PARO_CFG, PQ2_CFG=PQ2_CFG, dense_state=dense_state,
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
        fn = R.paroquant_linear if self.method == "paroquant" else R.pq2_linear
        y = fn(x2, self.t, self.bias)
        return y.reshape(*x.shape[:-1], y.shape[-1])


def hf_quantized_model(model_dir: Path, dtype: torch.dtype = torch.bfloat16):
    """transformers' Qwen2 forward with every quantized linear computed from the checkpoint's own
    quantized tensors by radiance.kernels.reference (the same numbers the format defines)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    from radiance.kernels.formats.paroquant import ParoTensors
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
        if isinstance(mod, torch.nn.Linear) and f"{name}.qweight" in state:
            tensors = (ParoTensors if method == "paroquant" else Pq2Tensors).from_state(state, name)
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
