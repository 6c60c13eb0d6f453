"""Correctness of served paths, from bench_serve.py's results: prod against eval, a served model
against radiance's CPU reference of the same checkpoint, and eval mode's CHECKALL lines.

    python bench/serve_compare.py modes EVAL.json PROD.json            # greedy tokens and logprobs
    python bench/serve_compare.py reference RESULTS.json STACK MODEL_DIR  # prompt logprobs vs the CPU
    python bench/serve_compare.py checkall EVAL.json                    # per-layer rel error in the logs
    python bench/serve_compare.py jit RESULTS.json                      # no radiance kernel compiled in a request

Each prints one line per stack and exits 1 when a tolerance (stated beside it) is exceeded.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# prod (torch.compile, CUDA graphs) against eval (eager): the same kernels, but inductor fuses the
# norms and activations around them in another order, and bf16 rounding differences grow over the
# layers. vLLM's own bf16 model drifts that way too, so a quantized stack is held to MODES_VS_BF16
# times the bf16 stack's drift on the same model (W4A8's int8 rounding flips on some of those
# differences: hence 2, not 1); without a bf16 stack in both files, to the absolute bounds.
MODES_VS_BF16 = 2.0
CHECKS = Path(__file__).resolve().parent / "results" / "checks-h200.json"  # the recorded checks
MODES_PROMPT_LOGPROB_MAX = 0.15  # nats, any prompt token
MODES_PROMPT_LOGPROB_MEAN = 0.02
# served (bf16 hidden states, the kernels) against the CPU reference in fp32: bf16's 2^-8 relative
# rounding of logits of std ~4 is ~0.02 nats a token, a few times that at worst
REFERENCE_LOGPROB_MAX = 0.35
REFERENCE_LOGPROB_MEAN = 0.05
# CHECKALL rel: the kernel's output against the exact result rounded to the output dtype; W4A8
# (RADIANCE_PQ_I8=1) quantizes the activations to int8 per 128-group, which the exact fp32 reference
# does not (pq2's reference does: its activations are int8 by format)
CHECKALL_REL_MAX = {"paroquant": 2e-2, "paroquant-i8": 6e-2, "pq2": 2e-2}
# CHECKALL's producer lines (plugin/checkall_producers.py): the fused site against the unfused one on
# the same inputs, both served kernels -- what the GPU tests gate per kernel (2e-3 relative); the
# residual the rest of the model reads must be the unfused one exactly
PRODUCER_REL_MAX = 2e-3


def _agree_prefix(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _drift(ev: dict, pr: dict) -> dict:
    d_prompt, agree, total, d_gen = [], 0, 0, []
    for a, b in zip(ev["samples"], pr["samples"]):
        d_prompt += [abs(x - y) for x, y in zip(a["prompt_logprobs"][1:], b["prompt_logprobs"][1:])]
        n = _agree_prefix(a["tokens"], b["tokens"])
        agree, total = agree + n, total + len(a["tokens"])
        d_gen += [abs(x - y) for x, y in zip(a["logprobs"][:n], b["logprobs"][:n])]
    return {"prompt_max": max(d_prompt), "prompt_mean": sum(d_prompt) / len(d_prompt), "greedy_agree": agree,
            "greedy_total": total, "greedy_logprob_max": max(d_gen, default=0.0)}


def modes(eval_json: Path, prod_json: Path) -> tuple[bool, dict]:
    ev, pr = json.loads(eval_json.read_text())["runs"], json.loads(prod_json.read_text())["runs"]
    names = sorted(n for n in set(ev) & set(pr) if "error" not in ev[n] and "error" not in pr[n])
    drift = {n: _drift(ev[n], pr[n]) for n in names}
    anchor = next((n for n in names if ev[n]["quant"] == "none"), None)
    if anchor:
        bound = {k: MODES_VS_BF16 * drift[anchor][k] for k in ("prompt_max", "prompt_mean")}
        rule = f"<= {MODES_VS_BF16}x {anchor}'s prod-vs-eval drift"
    else:
        bound, rule = {"prompt_max": MODES_PROMPT_LOGPROB_MAX, "prompt_mean": MODES_PROMPT_LOGPROB_MEAN}, "absolute"
    ok = True
    for n, d in drift.items():
        d["ok"] = good = all(d[k] <= bound[k] for k in bound)
        d["tolerance"] = {"rule": rule, **bound}
        ok &= good
        print(f"{n:>10} prod vs eval: prompt logprobs max |d| {d['prompt_max']:.4f} mean {d['prompt_mean']:.5f} "
              f"(bounds {bound['prompt_max']:.4f} / {bound['prompt_mean']:.5f}: {rule}); greedy tokens agree "
              f"{d['greedy_agree']}/{d['greedy_total']} before the first divergence, logprobs there max |d| "
              f"{d['greedy_logprob_max']:.4f} -> {'ok' if good else 'FAIL'}")
    return ok, drift


def pair(results: Path, a: str, b: str, anchor: Path = CHECKS) -> tuple[bool, dict]:
    """Two stacks of one run serving the same checkpoint by different kernels (the fused producers on
    and off): their prompt logprobs may differ as much as rounding alone moves this model, which
    is bounded by MODES_VS_BF16 x bf16's prod-vs-eval drift recorded in `anchor` (the random
    27B-width model turns any rounding change into that much drift)."""
    runs = json.loads(results.read_text())["runs"]
    bf16 = json.loads(anchor.read_text())["checks"]["modes"]["bf16"]
    bound = {k: MODES_VS_BF16 * bf16[k] for k in ("prompt_max", "prompt_mean")}
    d = _drift(runs[a], runs[b])
    d["ok"] = good = all(d[k] <= bound[k] for k in bound)
    d["tolerance"] = {"rule": f"<= {MODES_VS_BF16}x bf16's prod-vs-eval drift ({anchor.name})", **bound}
    print(f"{a} vs {b}: prompt logprobs max |d| {d['prompt_max']:.4f} mean {d['prompt_mean']:.5f} (bounds "
          f"{bound['prompt_max']:.4f} / {bound['prompt_mean']:.5f}); greedy tokens agree {d['greedy_agree']}/"
          f"{d['greedy_total']} before the first divergence, logprobs there max |d| {d['greedy_logprob_max']:.4f} -> "
          f"{'ok' if good else 'FAIL'}")
    return good, {f"{a} vs {b}": d}


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
    return good, {stack: {"logprobs": len(diffs), "max": max(diffs), "mean": mean, "ok": good,
                          "tolerance": {"max": REFERENCE_LOGPROB_MAX, "mean": REFERENCE_LOGPROB_MEAN}}}


CHECKED = ("paroquant", "pq2", "paroquant_mxfp4")


def _log(run: dict, logs: Path | None) -> Path:
    """A run's server log: where the results say, or under LOGS when the logs were moved (fetched)."""
    return logs / Path(run["log"]).name if logs else Path(run["log"])
CHECK_RE = re.compile(r"CHECKALL (\S+) (\w+) N=(\d+) K=(\d+) M=(\d+) rel=(\S+) rel_fp32=(\S+)")
PRODUCER_RE = re.compile(r"CHECKALL (\S+) \w+ N=\d+ K=\d+ M=\d+ producer=(\w+) fused_rel=(\S+) residual=(\S+)")


def _producers_checked(name: str, run: dict, text: str) -> tuple[bool, dict | None]:
    """A stack with the producer knobs set: its CHECKALL producer lines, each within PRODUCER_REL_MAX
    with the residual exact; None when the knobs are off."""
    env = run.get("env", {})
    if not any(str(env.get(k)) == "1" for k in ("RADIANCE_PQ_ROT_STREAM", "RADIANCE_PQ_ROT_STREAM2")):
        return True, None
    found = PRODUCER_RE.findall(text)
    if not found:
        print(f"{name:>10}: producer knobs set but no CHECKALL producer line -> FAIL")
        return False, {"sites": 0, "ok": False}
    worst = max(float(r) for _, _, r, _ in found)
    residual_ok = all(res in ("exact", "none") for _, _, _, res in found)
    good = worst <= PRODUCER_REL_MAX and residual_ok
    kinds = dict(Counter(k for _, k, _, _ in found))
    linears = len({n for n, *_ in found})
    print(f"{name:>10}: CHECKALL producers {kinds} on {linears} linears, fused vs unfused max rel "
          f"{worst:.2e} (tolerance {PRODUCER_REL_MAX}), residual {'exact' if residual_ok else 'DIFFERS'} "
          f"-> {'ok' if good else 'FAIL'}")
    return good, {"calls": kinds, "linears": linears, "max_rel": worst,
                  "residual_exact": residual_ok, "ok": good, "tolerance": PRODUCER_REL_MAX}


def checkall(results: Path, logs: Path | None = None) -> tuple[bool, dict]:
    """Every quantized layer's CHECKALL lines in a stack's log (LOGS: where the logs lie now)."""
    ok, rec = True, {}
    for name, run in json.loads(results.read_text())["runs"].items():
        if run["quant"] not in CHECKED or "error" in run:
            continue
        log = _log(run, logs)
        per_layer: dict[str, list[float]] = defaultdict(list)
        text = log.read_text(errors="replace")
        for m in CHECK_RE.finditer(text):
            per_layer[m.group(1)].append(float(m.group(6)))
        kind = run["quant"] + ("-i8" if run["env"].get("RADIANCE_PQ_I8") == "1" else "")
        if not per_layer:
            print(f"{name:>10}: no CHECKALL line in {log} (check_shapes set? eval mode?) -> FAIL")
            ok = False
            continue
        worst = max(max(v) for v in per_layer.values())
        calls = sum(len(v) for v in per_layer.values())
        good = worst <= CHECKALL_REL_MAX[kind]
        ok &= good
        rec[name] = {"kind": kind, "layers": len(per_layer), "calls": calls, "max_rel": worst, "ok": good,
                     "tolerance": CHECKALL_REL_MAX[kind]}
        print(f"{name:>10}: CHECKALL {kind} on {len(per_layer)} layers, {calls} calls, max rel {worst:.2e} "
              f"(tolerance {CHECKALL_REL_MAX[kind]}) -> {'ok' if good else 'FAIL'}")
        p_ok, p_rec = _producers_checked(name, run, text)
        ok &= p_ok
        if p_rec is not None:
            rec[name]["producers"] = p_rec
    return ok, rec


def jit(results: Path, logs: Path | None = None) -> tuple[bool, dict]:
    """The Triton kernels vLLM's JIT monitor named as compiled during requests: none may be radiance's."""
    from bench_serve import jit_compiles, radiance_kernels

    ours, ok, rec = radiance_kernels(), True, {}
    for name, run in json.loads(results.read_text())["runs"].items():
        if "error" in run:
            continue
        log = _log(run, logs)
        named = jit_compiles(log.read_text(errors="replace"))
        theirs = sorted(k for k in named if k in ours)
        rec[name] = {"named": named, "radiance": theirs, "ok": not theirs}
        ok &= not theirs
        print(f"{name:>10}: compiled during requests (vLLM's JIT monitor): {named or 'nothing'}; radiance's: "
              f"{theirs or 'none'} -> {'ok' if not theirs else 'FAIL'}")
    return ok, rec


def record(path: Path, check: str, rows: dict, source: Path) -> None:
    """Merge one check's rows into PATH (bench/perf_page.py renders it beside the serving table)."""
    head = json.loads(source.read_text())
    data = json.loads(path.read_text()) if path.is_file() else {k: head.get(k) for k in ("date", "gpu", "commit")}
    data.setdefault("checks", {})[check] = rows
    path.write_text(json.dumps(data, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", type=Path, default=None, help="merge the outcome into this JSON (the perf page's)")
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
    c.add_argument("--logs", type=Path, default=None, help="the directory the results' logs are in now")
    p = sub.add_parser("pair")
    p.add_argument("results", type=Path)
    p.add_argument("a")
    p.add_argument("b")
    j = sub.add_parser("jit")
    j.add_argument("results", type=Path)
    j.add_argument("--logs", type=Path, default=None, help="the directory the results' logs are in now")
    a = ap.parse_args(argv)
    ok, rows = {"modes": lambda: modes(a.eval_json, a.prod_json),
                "reference": lambda: reference(a.results, a.stack, a.model_dir),
                "checkall": lambda: checkall(a.results, a.logs), "pair": lambda: pair(a.results, a.a, a.b), "jit": lambda: jit(a.results, a.logs)}[a.cmd]()
    if a.record:
        record(a.record, a.cmd, rows, a.prod_json if a.cmd == "modes" else a.results)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
