"""Programmatic dependent launch at decode (kernels/pdl.py): each decode GEMM that can take it,
timed with and without, paired in one call (one graph per variant, alternated ABAB), with the
tables' rules lifted so every tile is measured (pq2: dp4a at M = 1, gluon at M = 2..8; paroquant:
mma_gl at every split and token tile). Not probed (slower or a tie on the H200): pq2's planes at
M = 9..16 with its split-K reduce dependent on it in turn, and paroquant's prologue triggering at
each program's end instead of its start. Each pair's outputs, replayed in a CUDA graph, must be
bit-identical.

    python bench/probes/pdl_probe.py --out DIR [--shapes out,qkv,down,gate_up] [--ms 1,2,4,8]
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # bench/: the probes share its helpers

import argparse
import json
import os

import torch

from floor import paro_case, pq2_case  # bench/ (run from the repo root or bench/)
from bench_pq2 import SHAPES
from timing import graph_time, run_header

from radiance.kernels import paro_ops, pq2_ops
from radiance.kernels.nvidia.pq2 import PDL_PATHS  # the pq2 kinds that may launch dependent


def replayed(fn):
    """fn's output from one replay of a CUDA graph that captured it."""
    fn()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = fn()
    g.replay()
    torch.cuda.synchronize()
    return y.clone()


def set_pdl(method: str, layers, on: bool) -> None:
    for layer in layers:  # the layer's PDL decision (pq2: for its dependent kinds, nvidia/pq2's PDL_PATHS)
        layer.pdl = on


def describe(method: str, layer, m: int) -> str:
    if method == "pq2":
        path, tile = pq2_ops.choose(layer, m, torch.device("cuda"))
        return f"{path} bn{tile.bn} split{tile.split} persist{tile.persist}"
    t = paro_ops.tile_for(layer, m)
    return f"{t.kind} bn{t.bn} split{t.split} persist{t.persist}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--shapes", default="out,qkv,down,gate_up")
    ap.add_argument("--ms", default="1,2,4,8")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--run", type=int, default=None)
    ap.add_argument("--methods", default="pq2,paroquant")
    args = ap.parse_args()
    date, gpu, bw = run_header()
    # every mma_gl tile measured; the table's own rule comes from these rows
    paro_ops.launches_dependent = lambda t: t.kind == "mma_gl" and not t.persist
    gen = torch.Generator(device="cuda").manual_seed(0)
    jl = open(os.path.join(args.out, "results.jsonl"), "a")
    for name in args.shapes.split(","):
        n, k = SHAPES[name]
        for method, case in (("pq2", lambda: pq2_case(n, k)), ("paroquant", lambda: paro_case(n, k, gen))):
            if method not in args.methods.split(","):
                continue
            nbytes, layers, _, ours, _ = case()
            roof = nbytes / bw * 1e6
            for m in map(int, args.ms.split(",")):
                what = describe(method, layers[0], m)
                if method == "pq2" and not what.startswith(PDL_PATHS):
                    continue
                xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
                outs = {}
                for on in (False, True):
                    set_pdl(method, layers, on)
                    outs[on] = replayed(lambda: ours(layers[0], xs[0]))
                same = torch.equal(outs[False], outs[True])
                times = {False: [], True: []}
                for _ in range(args.passes):
                    for on in (False, True):
                        set_pdl(method, layers, on)
                        times[on].append(graph_time([lambda l=l, x=xs[i % 4]: ours(l, x) for i, l in enumerate(layers)]))
                set_pdl(method, layers, False)
                best = {on: min(ts) for on, ts in times.items()}
                for on in (False, True):
                    jl.write(json.dumps({"date": date, "gpu": gpu, "method": method, "path": f"pdl_{'on' if on else 'off'}",
                                         "N": n, "K": k, "M": m, "us": round(best[on], 2), "roofline_us": round(roof, 2),
                                         "cublas_bf16_us": None, "gemlite_us": None, "tinygemm_us": None,
                                         "tile": what, "passes": [round(t, 2) for t in times[on]],
                                         "bit_identical": same, "run": args.run}) + "\n")
                print(f"{method:9s} {name:8s} M={m:2d} {what:32s} roof={roof:6.1f} off={best[False]:6.1f} "
                      f"({best[False] / roof:.2f}x) on={best[True]:6.1f} ({best[True] / roof:.2f}x) "
                      f"{best[True] / best[False] - 1:+.1%}{'' if same else ' MISMATCH'}", flush=True)
            del layers
            torch.cuda.empty_cache()
    jl.close()


if __name__ == "__main__":
    main()
