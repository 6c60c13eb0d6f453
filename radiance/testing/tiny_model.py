"""Tiny real checkpoints: a random 2-layer Qwen2 in bf16 and its paroquant / pq2 quantizations,
written as a Hugging Face directory vLLM and transformers load (tests of the plugin, the launcher's
kernel step, the warm-up), and one with its own trained tokenizer (`write_tiny_qwen`)."""

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
            quant = rtn.paroquant_mxfp4_linear_tensors if method == "paroquant_mxfp4" else rtn.paroquant_linear_tensors
            out.update(quant(w, *shared[group]).to_state(name))
    return out


def write_checkpoint(path: Path, state: dict[str, torch.Tensor], quant: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(tiny_config(quant), indent=1))
    save_file({k: v.contiguous().clone() for k, v in state.items()}, str(path / "model.safetensors"))
    return path


PARO_CFG = {"quant_method": "paroquant", "bits": 4, "group_size": 128, "krot": 4}
PQ2_CFG = {"quant_method": "pq2", "bits": 2, "group_size": 128}
MXFP4_CFG = {"quant_method": "paroquant_mxfp4", "bits": 4, "group_size": 32, "krot": 4}


# A tiny Qwen2 with its own tokenizer, for the learned-rotation tests (seconds): transformers' Qwen2
# with random weights (hidden 256, intermediate 512: two 128-groups and four, so every linear is
# quantizable) saved in bf16 like a real source -- with a few input channels of every linear 8x
# larger, the outliers of trained LLMs that channel scales and rotations exist to tame, so there is
# something to learn -- and a byte-level BPE of 512 tokens trained on the shipped calibration
# corpus, so `--calib` and the shipped text both tokenize as they would for a real model.
def write_tiny_qwen(path: Path, layers: int = 2, seed: int = 0) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    from radiance.quantize.calibration import shipped_texts

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(list(shipped_texts().values()), trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>").save_pretrained(path)
    cfg = Qwen2Config(vocab_size=512, hidden_size=256, intermediate_size=512, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(cfg)
    with torch.no_grad():
        for name, mod in model.model.layers.named_modules():
            if isinstance(mod, torch.nn.Linear):
                mod.weight[:, torch.randperm(mod.in_features)[:4]] *= 8
    model.to(torch.bfloat16).save_pretrained(path)
    return path
