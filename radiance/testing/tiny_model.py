"""A tiny real checkpoint: a random 2-layer Qwen2 in bf16 and its paroquant / pq2 quantizations,
written as a Hugging Face directory vLLM and transformers load (tests of the plugin, the launcher's
kernel step, the warm-up)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from radiance.quantize import rtn

H, I, HEADS, KV, VOCAB, LAYERS = 256, 512, 4, 2, 512, 2
HEAD_DIM = H // HEADS


def qwen2_config(layers: int, hidden: int, intermediate: int, heads: int, kv_heads: int, vocab: int,
                 max_positions: int = 32768, rope_theta: float = 1000000.0) -> dict:
    """A Qwen2ForCausalLM config.json of these dimensions (bf16, untied lm_head)."""
    return {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": hidden,
        "intermediate_size": intermediate, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "vocab_size": vocab, "max_position_embeddings": max_positions,
        "max_window_layers": layers, "rms_norm_eps": 1e-6, "rope_theta": rope_theta, "hidden_act": "silu",
        "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False,
    }


def tiny_config(quant: dict) -> dict:
    return {**qwen2_config(LAYERS, H, I, HEADS, KV, VOCAB, 512, 10000.0), "quantization_config": quant}


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
