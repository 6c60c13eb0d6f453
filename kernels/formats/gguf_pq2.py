"""PQ2_0 GGUF (ggml type 142) -> the radiance `pq2` safetensors layout.

gguf-py does not know type 142, so this module reads the GGUF container itself (numpy + struct):
header, metadata, tensor infos, then each tensor's bytes at its aligned offset.

PQ2_0 block (34 bytes per 128 weights along a row): `{f16 d; u8 qs[32]}`, element j of the block
in byte j/4 at bits 2*(j%4), codes 0/1/2 = -1/0/+1. A row of K weights is K/128 blocks, so for a
tensor with ne = [K, N] the bytes reshape to [N, K/128, 34]: `d` -> scales [N, K/128] f16 and the
`qs` bytes, concatenated along the row, are exactly radiance's qweight [N, K/4] u8.

Tensor names are mapped from llama.cpp's (`blk.N.attn_q`, ...) to Hugging Face's
(`model.layers.N.self_attn.q_proj`, ...); for `llama` the q/k rows are un-permuted (llama.cpp
interleaves them for its rope). F32/F16/BF16 tensors (embeddings, norms, biases, lm_head) are
written as bf16, like any HF bf16 checkpoint radiance quantizes.
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from safetensors.torch import save_file

from radiance.kernels.formats import FormatError
from radiance.kernels.formats.pq2 import GROUP_SIZE, Pq2Tensors, validate

GGML_PQ2_0 = 142
PQ2_BLOCK_BYTES = 34
GGUF_MAGIC = b"GGUF"
# ggml type -> (numpy dtype or None for special handling, bytes per element)
PLAIN_TYPES = {0: ("F32", np.float32), 1: ("F16", np.float16), 30: ("BF16", np.uint16)}
_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
STRING, ARRAY = 8, 9


@dataclass
class TensorInfo:
    name: str
    ne: tuple[int, ...]  # ggml order: ne[0] is the row length (K)
    ggml_type: int
    offset: int


@dataclass
class GgufFile:
    path: Path
    metadata: dict
    tensors: list[TensorInfo]
    data_start: int

    def read(self, t: TensorInfo, nbytes: int) -> np.ndarray:
        with self.path.open("rb") as f:
            f.seek(self.data_start + t.offset)
            raw = f.read(nbytes)
        if len(raw) != nbytes:
            raise FormatError(f"{self.path}: tensor {t.name} is truncated ({len(raw)} of {nbytes} bytes)")
        return np.frombuffer(raw, dtype=np.uint8)


def _read(f: BinaryIO, fmt: str):
    size = struct.calcsize(fmt)
    buf = f.read(size)
    if len(buf) != size:
        raise FormatError(f"{f.name}: unexpected end of file in the GGUF header")
    return struct.unpack(fmt, buf)[0]


def _string(f: BinaryIO) -> str:
    n = _read(f, "<Q")
    return f.read(n).decode("utf-8")


def _value(f: BinaryIO, vtype: int):
    if vtype in _SCALARS:
        return _read(f, _SCALARS[vtype])
    if vtype == STRING:
        return _string(f)
    if vtype == ARRAY:
        item_type, n = _read(f, "<I"), _read(f, "<Q")
        return [_value(f, item_type) for _ in range(n)]
    raise FormatError(f"{f.name}: unknown GGUF metadata value type {vtype}")


def read_gguf(path: Path) -> GgufFile:
    path = Path(path)
    with path.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise FormatError(f"{path}: not a GGUF file (bad magic)")
        version = _read(f, "<I")
        if version not in (2, 3):
            raise FormatError(f"{path}: GGUF version {version} is not supported (2 or 3)")
        n_tensors, n_kv = _read(f, "<Q"), _read(f, "<Q")
        metadata = {}
        for _ in range(n_kv):
            key = _string(f)
            metadata[key] = _value(f, _read(f, "<I"))
        tensors = []
        for _ in range(n_tensors):
            name = _string(f)
            n_dims = _read(f, "<I")
            ne = tuple(_read(f, "<Q") for _ in range(n_dims))
            tensors.append(TensorInfo(name, ne, _read(f, "<I"), _read(f, "<Q")))
        align = int(metadata.get("general.alignment", 32))
        start = (f.tell() + align - 1) // align * align
    return GgufFile(path, metadata, tensors, start)


def pq2_from_bytes(raw: np.ndarray, n: int, k: int, name: str) -> Pq2Tensors:
    """[N * K/128 * 34] bytes of PQ2_0 blocks -> Pq2Tensors (qweight [N, K/4], scales [N, K/128])."""
    if k % GROUP_SIZE:
        raise FormatError(f"{name}: PQ2_0 row length {k} is not a multiple of {GROUP_SIZE}")
    blocks = raw.reshape(n, k // GROUP_SIZE, PQ2_BLOCK_BYTES)
    scales = np.ascontiguousarray(blocks[:, :, :2]).view(np.float16).reshape(n, k // GROUP_SIZE)
    qs = np.ascontiguousarray(blocks[:, :, 2:]).reshape(n, k // 4)
    return Pq2Tensors(qweight=torch.from_numpy(qs.copy()), scales=torch.from_numpy(scales.copy()))


# llama.cpp tensor names -> Hugging Face module names (Llama / Qwen2 family)
_GLOBAL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj",
}
_ARCHS = {"qwen2": "Qwen2ForCausalLM", "llama": "LlamaForCausalLM"}


def hf_name(gguf_name: str) -> str:
    module, _, kind = gguf_name.rpartition(".")
    if module in _GLOBAL:
        return f"{_GLOBAL[module]}.{kind}"
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)", module)
    if m and m.group(2) in _BLOCK:
        return f"model.layers.{m.group(1)}.{_BLOCK[m.group(2)]}.{kind}"
    raise FormatError(f"GGUF tensor {gguf_name}: no Hugging Face name known for it (Llama/Qwen2 names only)")


def _block_kind(gguf_name: str) -> str | None:
    parts = gguf_name.split(".")
    return parts[2] if parts[0] == "blk" and len(parts) > 3 else None


def _unpermute_rows(t: torch.Tensor, n_head: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row interleave (rows = output features, so it applies to any row-major tensor)."""
    rows = t.shape[0]
    return t.reshape(n_head, rows // n_head // 2, 2, *t.shape[1:]).transpose(1, 2).reshape(t.shape)


def hf_config(meta: dict, vocab: int, tied: bool) -> dict:
    arch = meta.get("general.architecture")
    if arch not in _ARCHS:
        raise FormatError(f"GGUF general.architecture {arch!r}: the importer knows {', '.join(_ARCHS)}")

    def key(k, default=None):
        v = meta.get(f"{arch}.{k}", default)
        if v is None:
            raise FormatError(f"GGUF metadata {arch}.{k} is missing")
        return v

    return {
        "architectures": [_ARCHS[arch]], "model_type": arch,
        "hidden_size": key("embedding_length"), "intermediate_size": key("feed_forward_length"),
        "num_hidden_layers": key("block_count"), "num_attention_heads": key("attention.head_count"),
        "num_key_value_heads": key("attention.head_count_kv", meta.get(f"{arch}.attention.head_count")),
        "rms_norm_eps": key("attention.layer_norm_rms_epsilon", 1e-6),
        "rope_theta": key("rope.freq_base", 10000.0),
        "max_position_embeddings": key("context_length", 32768),
        "vocab_size": vocab, "tie_word_embeddings": tied, "hidden_act": "silu", "torch_dtype": "bfloat16",
        "quantization_config": {"quant_method": "pq2", "bits": 2, "group_size": GROUP_SIZE},
    }


def import_gguf_pq2(gguf_path: Path, out_dir: Path) -> dict[str, torch.Tensor]:
    """Convert a PQ2_0 GGUF into `out_dir` (config.json + model.safetensors); returns the tensors.

    `out_dir` must be a fresh directory (callers wrap this in radiance.atomic.directory)."""
    g = read_gguf(gguf_path)
    meta = g.metadata
    arch = meta.get("general.architecture")
    heads = {"attn_q": meta.get(f"{arch}.attention.head_count"),
             "attn_k": meta.get(f"{arch}.attention.head_count_kv", meta.get(f"{arch}.attention.head_count"))}
    out: dict[str, torch.Tensor] = {}
    n_pq2 = 0
    vocab = None
    for t in g.tensors:
        name = hf_name(t.name)
        k = t.ne[0]
        n = int(np.prod(t.ne[1:])) if len(t.ne) > 1 else 1
        if t.ggml_type == GGML_PQ2_0:
            if len(t.ne) != 2:
                raise FormatError(f"{gguf_path}: PQ2_0 tensor {t.name} has {len(t.ne)} dims; expected 2")
            prefix = name.removesuffix(".weight")
            q = pq2_from_bytes(g.read(t, n * (k // GROUP_SIZE) * PQ2_BLOCK_BYTES), n, k, t.name)
            validate(q, prefix)
            if arch == "llama" and (blk := _block_kind(t.name)) in heads:
                q = Pq2Tensors(_unpermute_rows(q.qweight, heads[blk]), _unpermute_rows(q.scales, heads[blk]))
            out.update(q.to_state(prefix))
            n_pq2 += 1
        elif t.ggml_type in PLAIN_TYPES:
            label, dt = PLAIN_TYPES[t.ggml_type]
            count = int(np.prod(t.ne))
            arr = g.read(t, count * np.dtype(dt).itemsize).view(dt).reshape(tuple(reversed(t.ne)))
            ten = torch.from_numpy(arr.copy())
            ten = ten.view(torch.bfloat16) if label == "BF16" else ten.to(torch.bfloat16)
            if arch == "llama" and (blk := _block_kind(t.name)) in heads:
                ten = _unpermute_rows(ten, heads[blk])
            out[name] = ten
            if t.name == "token_embd.weight":
                vocab = t.ne[1]
        else:
            raise FormatError(
                f"{gguf_path}: tensor {t.name} has ggml type {t.ggml_type}; the importer reads PQ2_0 (142), F32, F16, BF16"
            )
    if n_pq2 == 0:
        raise FormatError(f"{gguf_path}: no PQ2_0 (type 142) tensor; not a PQ2_0 GGUF")
    if vocab is None:
        raise FormatError(f"{gguf_path}: no token_embd.weight tensor")
    cfg = hf_config(meta, vocab, tied="lm_head.weight" not in out)
    out_dir = Path(out_dir)
    save_file(out, str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    return out
