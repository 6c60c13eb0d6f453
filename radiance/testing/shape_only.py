"""Shape-only checkpoints: safetensors files whose headers declare a model's tensors but hold no
data (or zeros). For what reads headers alone (the launcher's plan and kernel specs, `radiance
setup`'s checks) where the model cannot exist here (27B checkpoints on a 2-core CI machine).
Loaders that read the data refuse them.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

from radiance.checkpoint import DTYPE_BYTES, linear_tensors


def write_headers(path: Path, tensors: dict[str, tuple[str, list[int]]], zeros: bool = False) -> Path:
    """A safetensors header for `tensors` (name -> (dtype, shape)), data offsets as if the data followed;
    zeros=True writes that data too (all zero bytes): a complete file, for what checks the sizes."""
    meta, off = {}, 0
    for name, (dtype, shape) in sorted(tensors.items()):
        size = math.prod(shape) * DTYPE_BYTES[dtype]
        meta[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + size]}
        off += size
    blob = json.dumps(meta).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + (bytes(off) if zeros else b""))
    return path


def layer_shapes(quant: str, hidden: int, q: int, kv: int, inter: int, layer: int = 0, krot: int | None = None) -> dict:
    """One decoder layer's linears (Qwen2/Llama names) in the checkpoint format of `quant`: the code
    and scale tensors the shape readers look at, and the rotations too when `krot` is given."""
    pre = f"model.layers.{layer}"
    mods = {f"{pre}.self_attn.q_proj": (q, hidden), f"{pre}.self_attn.k_proj": (kv, hidden),
            f"{pre}.self_attn.v_proj": (kv, hidden), f"{pre}.self_attn.o_proj": (hidden, q),
            f"{pre}.mlp.gate_proj": (inter, hidden), f"{pre}.mlp.up_proj": (inter, hidden),
            f"{pre}.mlp.down_proj": (hidden, inter)}
    out: dict[str, tuple[str, list[int]]] = {}
    for mod, (n, k) in mods.items():
        for suffix, spec in linear_tensors(quant, n, k, krot or 8).items():
            if krot or suffix not in ("pairs", "theta", "channel_scales"):
                out[f"{mod}.{suffix}"] = spec
    return out


def write_zero_checkpoint(d: Path, quant: str, hidden: int = 256, inter: int = 512, krot: int = 8,
                          chat_template: str | None = None) -> Path:
    """A one-layer Qwen2 checkpoint in `quant`'s format whose weights are all zero bytes: complete and
    well-formed for what checks a checkpoint without loading it (`radiance setup`, the launch plan
    vllm-switch checks before it stops anything), useless to run. `chat_template`: its bundled template."""
    d.mkdir(parents=True, exist_ok=True)
    if chat_template is not None:
        (d / "chat_template.jinja").write_text(chat_template)
    config = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": hidden,
              "intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": hidden // 128,
              "num_key_value_heads": 1}
    if quant != "none":
        bits, group = {"pq2": (2, 128), "paroquant_mxfp4": (4, 32)}.get(quant, (4, 128))
        config["quantization_config"] = {"quant_method": quant, "bits": bits, "group_size": group, "krot": krot}
    (d / "config.json").write_text(json.dumps(config))
    write_headers(d / "model.safetensors", layer_shapes(quant, hidden, hidden, 128, inter, krot=krot), zeros=True)
    return d
