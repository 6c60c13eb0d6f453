"""Generate docs/perf.md, the one page of current performance, from the latest results in bench/results/.

    python bench/perf_page.py            # rewrites docs/perf.md
    python bench/perf_page.py --check    # exit 1 if docs/perf.md is not what the results give

Inputs (each the output of one device run, committed as it came back):
- serve-*.json: bench/bench_serve.py in prod mode (date, GPU, commit and versions inside);
- paro-*.jsonl: bench/bench_paro.py rows (the paroquant kernels against cuBLAS and vLLM's int4 kernels).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "perf.md"
PATHS = {"bf16": "bf16 (vLLM)", "awq": "int4 `awq_marlin` (vLLM)", "paro": "paroquant W4A16", "paro-i8": "paroquant W4A8",
         "pq2": "pq2 (ternary)", "small": "paroquant W4A16, 2-layer width-1024 model"}


def _best(rounds: list[dict], key: str = "tokens_per_s") -> float:
    return max(r[key] for r in rounds)


def serving(path: Path) -> list[str]:
    r = json.loads(path.read_text())
    runs = r["runs"]
    v = r.get("versions", {})
    out = [f"## Serving: {r['gpu']}, {r['date']}, commit `{r['commit'][:10]}`", "",
           f"vLLM {v.get('vllm')}, torch {v.get('torch')}, Triton {v.get('triton')}; `bench/bench_serve.py` over "
           f"`bench/stacks/h200.yaml` in prod mode (torch.compile + CUDA graphs), every stack through "
           "`radiance-launch`. The model: Qwen2, 16 layers at 27B width (hidden 5120, intermediate 17408, "
           "40 heads, 8 KV heads, vocabulary 151936, bf16 lm_head), random weights from a seed, quantized by "
           "`radiance quantize` (paroquant: random rotations; the AWQ twin: identity rotations, the same RTN). "
           "Decode: output tokens per second of wall time for that many concurrent requests of 256 greedy tokens "
           "(each round, in order); prefill: 8 distinct 2048-token prompts sent at once; TTFT: one such prompt alone.",
           "", "| path | c=1 tok/s | c=4 | c=16 (rounds) | prefill tok/s | TTFT p50 (2048) | c=1 ×bf16 | c=1 ×awq | "
           "c=16 ×awq (worst round) | kernels compiled while serving |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    base = {k: runs[k] for k in ("bf16", "awq") if k in runs}
    for name, run in runs.items():
        c1, c4, c16 = _best(run["c1"]), _best(run["c4"]), [x["tokens_per_s"] for x in run["c16"]]
        rel = {k: c1 / _best(b["c1"]) for k, b in base.items()}
        worst16 = min(c16) / _best(base["awq"]["c16"]) if "awq" in base else None
        f = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
        out.append(f"| {PATHS.get(name, name)} | {c1:.0f} | {c4:.0f} | {' / '.join(f'{x:.0f}' for x in c16)} | "
                   f"{run['prefill']['prefill_tokens_per_s']:.0f} | {1000 * run['prefill']['ttft_p50_s']:.0f} ms | "
                   f"{f(rel.get('bf16'))} | {f(rel.get('awq'))} | {f(worst16)} | "
                   f"{run['kernels_compiled_while_serving']} |")
    if "relaunch" in r:
        rl = r["relaunch"]
        out += ["", f"A second start of `{rl['stack']}`: ready after {rl['ready_s']:.0f} s, "
                    f"{rl['kernels_compiled']} kernels compiled."]
    return out + [""]


def kernels(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("shape")]
    if not rows:
        return []
    gpu, date = rows[0]["gpu"], rows[0]["date"]
    out = [f"## paroquant kernels: {gpu}, {date}", "",
           "`bench/bench_paro.py`: µs per call, median of CUDA-graph replays over weight copies larger than L2, "
           "random data. Roofline: the 4.25-bit weight bytes at the streaming-read bandwidth measured in the same "
           "run. Machete / Marlin: vLLM's int4 kernels (what `awq_marlin` serves; Machete is its choice on sm_90) "
           "on the same codes through vLLM's own AWQ linear method.", "",
           "| shape | N | K | M | W4A16 µs | W4A8 µs | roofline µs | cuBLAS bf16 | Machete | Marlin | tinygemm | W4A16 ×Marlin |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    by = {}
    for r in rows:
        by.setdefault((r["shape"], r["N"], r["K"], r["M"]), {})[r["path"]] = r
    f = lambda x: "—" if x is None else f"{x:.1f}"  # noqa: E731
    for (shape, n, k, m), paths in by.items():
        a, b = paths.get("w4a16"), paths.get("w4a8")
        any_ = a or b
        marlin = any_.get("marlin_us")
        ratio = f"{marlin / a['us']:.2f}" if a and marlin else "—"
        out.append(f"| {shape} | {n} | {k} | {m} | {f(a and a['us'])} | {f(b and b['us'])} | {f(any_['roofline_us'])} | "
                   f"{f(any_['cublas_bf16_us'])} | {f(any_.get('machete_us'))} | {f(marlin)} | "
                   f"{f(any_.get('tinygemm_us'))} | {ratio} |")
    return out + [""]


def page() -> str:
    lines = ["# Performance", "",
             "Generated by `python bench/perf_page.py` from the latest results in `bench/results/` (one device run "
             "each, committed as they came back); do not edit by hand. How the numbers are taken: "
             "[nvidia.md](nvidia.md#measuring).", ""]
    for p in sorted(RESULTS.glob("serve-*.json")):
        lines += serving(p)
    for p in sorted(RESULTS.glob("paro-*.jsonl")):
        lines += kernels(p)
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
