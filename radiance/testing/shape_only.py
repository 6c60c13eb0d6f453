"""Shape-only checkpoints: safetensors files whose headers declare a model's tensors but hold no
data. For what reads headers alone (the launcher's plan and kernel specs) where the model cannot
exist here (27B checkpoints on a 2-core CI machine). Loaders that read the data refuse them.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

_BYTES = {"I32": 4, "U8": 1, "F16": 2, "BF16": 2, "I16": 2, "F32": 4}


def write_headers(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> Path:
    """A safetensors header for `tensors` (name -> (dtype, shape)), data offsets as if the data followed."""
    meta, off = {}, 0
    for name, (dtype, shape) in sorted(tensors.items()):
        size = math.prod(shape) * _BYTES[dtype]
        meta[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + size]}
        off += size
    blob = json.dumps(meta).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob)
    return path


def layer_shapes(quant: str, hidden: int, q: int, kv: int, inter: int, layer: int = 0) -> dict:
    """One decoder layer's linears (Qwen2/Llama names) in the checkpoint format of `quant`."""
    pre = f"model.layers.{layer}"
    mods = {f"{pre}.self_attn.q_proj": (q, hidden), f"{pre}.self_attn.k_proj": (kv, hidden),
            f"{pre}.self_attn.v_proj": (kv, hidden), f"{pre}.self_attn.o_proj": (hidden, q),
            f"{pre}.mlp.gate_proj": (inter, hidden), f"{pre}.mlp.up_proj": (inter, hidden),
            f"{pre}.mlp.down_proj": (hidden, inter)}
    out: dict[str, tuple[str, list[int]]] = {}
    for mod, (n, k) in mods.items():
        if quant == "paroquant":
            out[f"{mod}.qweight"] = ("I32", [k, n // 8])
            out[f"{mod}.qzeros"] = ("I32", [k // 128, n // 8])
            out[f"{mod}.scales"] = ("F16", [k // 128, n])
        elif quant == "paroquant_mxfp4":
            out[f"{mod}.weight"] = ("U8", [n, k // 2])
            out[f"{mod}.weight_scale"] = ("U8", [n, k // 32])
        elif quant == "pq2":
            out[f"{mod}.qweight"] = ("U8", [n, k // 4])
            out[f"{mod}.scales"] = ("F16", [n, k // 128])
        else:
            out[f"{mod}.weight"] = ("BF16", [n, k])
    return out
