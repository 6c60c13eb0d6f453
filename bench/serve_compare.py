"""Correctness of served paths, from bench_serve.py's results: prod against eval, a served model
against radiance's CPU reference of the same checkpoint, and eval mode's CHECKALL lines.

    python bench/serve_compare.py modes EVAL.json PROD.json            # greedy tokens and logprobs
    python bench/serve_compare.py reference RESULTS.json STACK MODEL_DIR  # prompt logprobs vs the CPU
    python bench/serve_compare.py checkall EVAL.json                    # per-layer rel error in the logs

Each prints one line per stack and exits 1 when a tolerance (stated beside it) is exceeded.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

# prod (torch.compile, CUDA graphs) against eval (eager): the same kernels, but inductor fuses the
# norms and activations around them in another order; bf16 rounding differences grow over layers
MODES_PROMPT_LOGPROB_MAX = 0.15  # nats, any prompt token
MODES_PROMPT_LOGPROB_MEAN = 0.02
MODES_GREEDY_MIN_AGREE = 0.75  # share of generated tokens before the first divergence, over all samples
# served (bf16 hidden states, the kernels) against the CPU reference in fp32: bf16's 2^-8 relative
# rounding of logits of std ~4 is ~0.02 nats a token, a few times that at worst
REFERENCE_LOGPROB_MAX = 0.35
REFERENCE_LOGPROB_MEAN = 0.05
# CHECKALL rel: the kernel's output against the exact result rounded to the output dtype; W4A8
# (RADIANCE_PQ_I8=1) quantizes the activations to int8 per 128-group, which the exact fp32 reference
# does not (pq2's reference does: its activations are int8 by format)
CHECKALL_REL_MAX = {"paroquant": 2e-2, "paroquant-i8": 6e-2, "pq2": 2e-2}


def _agree_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def modes(eval_json: Path, prod_json: Path) -> bool:
    ev, pr = json.loads(eval_json.read_text())["runs"], json.loads(prod_json.read_text())["runs"]
    ok = True
    for name in sorted(set(ev) & set(pr)):
        d_prompt, agree, total, d_gen = [], 0, 0, []
        for a, b in zip(ev[name]["samples"], pr[name]["samples"]):
            d_prompt += [abs(x - y) for x, y in zip(a["prompt_logprobs"][1:], b["prompt_logprobs"][1:])]
            n = _agree_prefix(a["tokens"], b["tokens"])
            agree, total = agree + n, total + len(a["tokens"])
            d_gen += [abs(x - y) for x, y in zip(a["logprobs"][:n], b["logprobs"][:n])]
        mean = sum(d_prompt) / len(d_prompt)
        good = max(d_prompt) <= MODES_PROMPT_LOGPROB_MAX and mean <= MODES_PROMPT_LOGPROB_MEAN \
            and agree / total >= MODES_GREEDY_MIN_AGREE
        ok &= good
        print(f"{name:>10} prod vs eval: prompt logprobs max |d| {max(d_prompt):.4f} mean {mean:.5f}; greedy tokens "
              f"agree {agree}/{total} before the first divergence, logprobs there max |d| {max(d_gen, default=0):.4f}"
              f" -> {'ok' if good else 'FAIL'}")
    return ok


def reference(results: Path, stack: str, model_dir: Path) -> bool:
    """The served prompt-token logprobs against transformers' forward of the checkpoint's bf16 source
    with every quantized linear swapped for radiance's reference (radiance eval's path), in fp32."""
    import torch
    from transformers import AutoModelForCausalLM

    from radiance.quantize.evaluate import _swap, reference_linears, source_of

    run = json.loads(results.read_text())["runs"][stack]
    _, mods = reference_linears(model_dir, None)
    model = AutoModelForCausalLM.from_pretrained(source_of(model_dir), dtype=torch.float32).eval()
    _swap(model, mods)
    diffs = []
    with torch.inference_mode():
        for s in run["samples"]:
            ids = torch.tensor([s["prompt"]])
            lp = torch.log_softmax(model(ids).logits[0].float(), -1)
            ref = lp[:-1].gather(-1, ids[0, 1:, None])[:, 0].tolist()
            diffs += [abs(a - b) for a, b in zip(s["prompt_logprobs"][1:], ref)]
    mean = sum(diffs) / len(diffs)
    good = max(diffs) <= REFERENCE_LOGPROB_MAX and mean <= REFERENCE_LOGPROB_MEAN
    print(f"{stack:>10} served vs CPU reference: {len(diffs)} prompt logprobs, max |d| {max(diffs):.4f} "
          f"mean {mean:.5f} -> {'ok' if good else 'FAIL'}")
    return good


CHECK_RE = re.compile(r"CHECKALL (\S+) (\w+) N=(\d+) K=(\d+) M=(\d+) rel=(\S+) rel_fp32=(\S+)")


def checkall(results: Path) -> bool:
    ok = True
    for name, run in json.loads(results.read_text())["runs"].items():
        if run["quant"] not in ("paroquant", "pq2"):
            continue
        per_layer: dict[str, list[float]] = defaultdict(list)
        for m in CHECK_RE.finditer(Path(run["log"]).read_text(errors="replace")):
            per_layer[m.group(1)].append(float(m.group(6)))
        kind = run["quant"] + ("-i8" if run["env"].get("RADIANCE_PQ_I8") == "1" else "")
        if not per_layer:
            print(f"{name:>10}: no CHECKALL line in {run['log']} (check_shapes set? eval mode?) -> FAIL")
            ok = False
            continue
        worst = max(max(v) for v in per_layer.values())
        calls = sum(len(v) for v in per_layer.values())
        good = worst <= CHECKALL_REL_MAX[kind]
        ok &= good
        print(f"{name:>10}: CHECKALL {kind} on {len(per_layer)} layers, {calls} calls, max rel {worst:.2e} "
              f"(tolerance {CHECKALL_REL_MAX[kind]}) -> {'ok' if good else 'FAIL'}")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("modes")
    m.add_argument("eval_json", type=Path)
    m.add_argument("prod_json", type=Path)
    r = sub.add_parser("reference")
    r.add_argument("results", type=Path)
    r.add_argument("stack")
    r.add_argument("model_dir", type=Path)
    c = sub.add_parser("checkall")
    c.add_argument("results", type=Path)
    a = ap.parse_args(argv)
    ok = {"modes": lambda: modes(a.eval_json, a.prod_json), "reference": lambda: reference(a.results, a.stack, a.model_dir),
          "checkall": lambda: checkall(a.results)}[a.cmd]()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
