"""The serving benchmark's models: a random Qwen2 of a given width made from a seed, and vLLM's AWQ
twin of an identity-rotation paroquant checkpoint (the same int4 codes, zeros and scales).

    python bench/serve_models.py dense OUT --layers 16 --hidden 5120 --intermediate 17408 --heads 40 \\
        --kv-heads 8 --tokenizer QWEN_DIR [--device cuda]
    radiance quantize OUT OUT-paroquant-identity --format paroquant --rotation identity --krot 1
    python bench/serve_models.py awq OUT-paroquant-identity OUT-awq

Random weights keep each layer's output at the scale of its input (std 1/sqrt(fan_in)) and the
logits peaked enough that greedy decoding is not a string of near-ties, so served tokens and
logprobs can be compared between paths.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from radiance import atomic
from radiance.quantize.convert import RECORD, TOKENIZER_FILES
from radiance.testing.tiny_model import qwen2_config

ROTATION = ("pairs", "theta", "channel_scales")
AWQ_CONFIG = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def dense(out: Path, cfg: dict, tokenizer: Path, seed: int, device: str, layers_per_shard: int = 4) -> Path:
    g = torch.Generator(device=device).manual_seed(seed)
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd

    def randn(*shape, std):
        return (torch.randn(*shape, generator=g, device=device) * std).to(torch.bfloat16).cpu()

    linears = {"self_attn.q_proj": (h, h), "self_attn.k_proj": (kv, h), "self_attn.v_proj": (kv, h),
               "self_attn.o_proj": (h, h), "mlp.gate_proj": (i, h), "mlp.up_proj": (i, h), "mlp.down_proj": (h, i)}
    with atomic.directory(out) as build:
        weight_map: dict[str, str] = {}
        shards = [range(s, min(s + layers_per_shard, cfg["num_hidden_layers"]))
                  for s in range(0, cfg["num_hidden_layers"], layers_per_shard)]
        for n, layers in enumerate([None, *shards]):
            name = f"model-{n:05d}-of-{len(shards) + 1:05d}.safetensors"
            t: dict[str, torch.Tensor] = {}
            if layers is None:  # embeddings, final norm, lm_head: logits of std ~4
                t = {"model.embed_tokens.weight": randn(v, h, std=1.0), "model.norm.weight": torch.ones(h).bfloat16(),
                     "lm_head.weight": randn(v, h, std=4.0 / h**0.5)}
            for layer in layers or ():
                p = f"model.layers.{layer}"
                t[f"{p}.input_layernorm.weight"] = torch.ones(h).bfloat16()
                t[f"{p}.post_attention_layernorm.weight"] = torch.ones(h).bfloat16()
                for lin, (rows, cols) in linears.items():
                    t[f"{p}.{lin}.weight"] = randn(rows, cols, std=cols**-0.5)
                    if lin.endswith(("q_proj", "k_proj", "v_proj")):
                        t[f"{p}.{lin}.bias"] = randn(rows, std=0.1)
            save_file(t, str(build / name), metadata={"format": "pt"})
            weight_map.update({k: name for k in t})
        (build / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        (build / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}) + "\n")
        for f in TOKENIZER_FILES:
            if (tokenizer / f).is_file():
                shutil.copy2(tokenizer / f, build / f)
        build.chmod(0o755)
    return out


def awq_from_identity(src: Path, out: Path) -> Path:
    """Drop the (identity) rotations and name the checkpoint AWQ: vLLM's awq / awq_marlin read the
    same qweight / qzeros / scales layout, codes and zeros as radiance's paroquant format."""
    cfg = json.loads((src / "config.json").read_text())
    qc = cfg.get("quantization_config") or {}
    if qc.get("quant_method") != "paroquant":
        raise SystemExit(f"{src}: not a paroquant checkpoint (quant_method {qc.get('quant_method')!r})")
    with atomic.directory(out) as build:
        for shard in sorted(src.glob("*.safetensors")):
            kept = {}
            with safe_open(shard, "pt") as f:
                for k in f.keys():
                    if k.rpartition(".")[2] in ROTATION:
                        t = f.get_tensor(k)
                        if not _is_identity(k, t):
                            raise SystemExit(f"{shard}: {k} is not an identity rotation; quantize with "
                                             "--rotation identity for an AWQ twin")
                        continue
                    kept[k] = f.get_tensor(k)
            save_file(kept, str(build / shard.name), metadata={"format": "pt"})
        for p in src.iterdir():  # not radiance's quantizer record: vLLM's own method reads this one
            if p.is_file() and p.suffix != ".safetensors" and p.name not in ("config.json", "model.safetensors.index.json",
                                                                            RECORD):
                shutil.copy2(p, build / p.name)
        index = src / "model.safetensors.index.json"
        if index.is_file():
            wm = json.loads(index.read_text())["weight_map"]
            wm = {k: v for k, v in wm.items() if k.rpartition(".")[2] not in ROTATION}
            (build / index.name).write_text(json.dumps({"metadata": {}, "weight_map": wm}) + "\n")
        cfg["quantization_config"] = dict(AWQ_CONFIG)
        (build / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
        build.chmod(0o755)
    return out


def _is_identity(name: str, t: torch.Tensor) -> bool:
    kind = name.rpartition(".")[2]
    if kind == "theta":
        return bool((t == 0).all())
    if kind == "channel_scales":
        return bool((t == 1).all())
    return True  # pairs: any pairing is the identity at angle 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dense", help="a random bf16 Qwen2 from a seed")
    d.add_argument("out", type=Path)
    for name, default in (("layers", 16), ("hidden", 5120), ("intermediate", 17408), ("heads", 40), ("kv-heads", 8),
                          ("vocab", 151936), ("seed", 0)):
        d.add_argument(f"--{name}", type=int, default=default)
    d.add_argument("--tokenizer", type=Path, required=True, help="directory whose tokenizer files are copied in")
    d.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    a = sub.add_parser("awq", help="vLLM's AWQ twin of an identity-rotation paroquant checkpoint")
    a.add_argument("src", type=Path)
    a.add_argument("out", type=Path)
    args = ap.parse_args(argv)
    if args.cmd == "dense":
        cfg = {**qwen2_config(args.layers, args.hidden, args.intermediate, args.heads, args.kv_heads, args.vocab),
               "bos_token_id": 151643, "eos_token_id": 151645}  # the Qwen tokenizer's
        print(dense(args.out, cfg, args.tokenizer, args.seed, args.device))
    else:
        print(awq_from_identity(args.src, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
