"""What an M = 1 linear of each 27B-class layer cannot beat on this GPU, measured (one device call).

The targets compare the M = 1 kernels with a roofline computed from a 1 GiB copy's bandwidth. A
layer of a few MB is not read at that rate by any kernel (the grid's ramp and tail are a larger
share), and radiance's linears are two launches (the activation pass, then the GEMV). So, per shape
and format (pq2 2.125 bits, paroquant 4.25 bits), under CUDA graphs with copies rotated past L2:
- read: the fastest of a few streaming-read kernels over exactly the layer's weight bytes -- the
  floor of any one-launch GEMV of the layer;
- pre: the activation pass alone (pq2: the int8 quantizer; paroquant: the rotation prologue);
- pair: pre, then read, in one graph -- the floor of any two-launch linear;
- gemm: the shipped GEMM alone on activations prepared once (ours minus the activation pass:
  what the GEMM costs over the read, and what the second launch adds);
- ours: the shipped M = 1 forward (table tile), cuBLAS bf16 and the copy roofline from this run;
- null (once per run): a kernel that does nothing, per launch in a graph -- the least any kernel takes.

    python bench/floor.py --out DIR      # rows appended to DIR/results.jsonl (path floor_*)
"""

from __future__ import annotations

import argparse
import json
import os

import torch
import triton
import triton.language as tl

from bench_paro import share_weights  # bench/ (run from the repo root or bench/)
from bench_pq2 import SHAPES, copies_for, make_layers
from timing import READ_TILES, best_read, graph_time, read_fn, run_header

from radiance.kernels import paro_ops, pq2_ops
from radiance.testing import paro_random as rnd
from radiance.kernels.triton import paro_rotate as pr

@triton.jit
def null_kernel(OUT, n):
    # one predicated store nobody takes (n = 0): a launch that does no work
    if tl.program_id(0) < n:
        tl.store(OUT + tl.program_id(0), 1)


def launch_cost(out: torch.Tensor) -> dict[str, float]:
    """µs per launch of a kernel that does nothing, replayed back to back in a CUDA graph: one
    program, and grids of 1 and 4 programs per SM (4 warps each) -- the floor under any kernel's
    time in a graph (a busy kernel overlaps part of it)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    return {f"floor_null_{g}": graph_time([lambda g=g: null_kernel[(g,)](out, 0, num_warps=4)] * 8)
            for g in (1, sms, 4 * sms)}


def pq2_bytes(n, k):
    return n * k // 4 + n * k // 128 * 2  # 2-bit codes, fp16 scales per 128-group


def paro_bytes(n, k):
    return n * k // 2 + 3 * n * k // 128  # codes, fp16 scales, int8 zero points


def read_target(nbytes, launches, tile=(1024, 1, 8)):
    """An ncu target (bench/profile_*.py): `launches` streaming reads of nbytes of random words."""
    assert tile in READ_TILES
    buf = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_()
    out = torch.empty(1 << 20, dtype=torch.int32, device="cuda")
    for _ in range(launches):
        read_fn(buf, out, tile)()


def pq2_case(n, k):
    nbytes = pq2_bytes(n, k)
    layers = [layer for layer, _ in make_layers(n, k, copies_for(nbytes))]
    pre = lambda l, x: pq2_ops.quantize_activations(x, True, l)  # noqa: E731
    ours = lambda l, x: pq2_ops.forward(l, x)  # noqa: E731

    def gemm(layer, x):
        path, tile = pq2_ops.choose(layer, 1, x.device)
        q, a, t = pq2_ops.quantize_activations(x, path != "legacy", layer)
        y = torch.empty(1, n, dtype=x.dtype, device=x.device)
        return lambda: pq2_ops.gemm_quantized(layer, path, tile, q, a, t, y)
    return nbytes, layers, pre, ours, gemm


def paro_case(n, k, gen):
    nbytes = paro_bytes(n, k)
    base = paro_ops.prepare(*rnd.merged([rnd.random_layer(n, k, gen)]))
    layers = share_weights(base, copies_for(nbytes))
    mode = paro_ops.prologue_mode(paro_ops.tile_for(base, 1).kind, base.i8)
    pre = lambda l, x: pr.rotate(x, l.tables, mode)  # noqa: E731
    ours = lambda l, x: paro_ops.forward(l, x)  # noqa: E731

    def gemm(layer, x):
        t = paro_ops.tile_for(layer, 1)
        a, s, rs = pr.rotate(x, layer.tables, mode)
        return lambda: paro_ops.gemm_rotated(layer, a, s, rs, x.dtype, t)
    return nbytes, layers, pre, ours, gemm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--run", type=int, default=None, help="a run number written into each row")
    args = ap.parse_args()
    date, gpu, bw = run_header()
    gen = torch.Generator(device="cuda").manual_seed(0)
    jl = open(os.path.join(args.out, "results.jsonl"), "a")
    out = torch.empty(1 << 20, dtype=torch.int32, device="cuda")
    for path, us in launch_cost(out).items():
        print(f"# {path}: {us:.2f} us per launch", flush=True)
        jl.write(json.dumps({"date": date, "gpu": gpu, "method": None, "path": path, "N": None, "K": None, "M": None,
                             "us": round(us, 2), "roofline_us": None, "cublas_bf16_us": None, "gemlite_us": None,
                             "tinygemm_us": None, "run": args.run}) + "\n")
    for name in args.shapes.split(","):
        n, k = SHAPES[name]
        wbf = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(copies_for(2 * n * k))]
        x1 = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        cub = graph_time([lambda w=w: x1 @ w.t() for w in wbf])
        del wbf
        for method, case in (("pq2", lambda: pq2_case(n, k)), ("paroquant", lambda: paro_case(n, k, gen))):
            if method == "paroquant" and name == "lm_head":
                continue  # not a paroquant layer in the benchmark
            nbytes, layers, pre, ours, gemm = case()
            xs = [torch.randn(1, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
            bufs = [torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_() for _ in range(len(layers))]
            read, tile = best_read(bufs, out)
            t_pre = graph_time([lambda l=l, x=xs[i % 4]: pre(l, x) for i, l in enumerate(layers)])
            reads = [read_fn(b, out, tile) for b in bufs]
            pair = 2 * graph_time([f for i, l in enumerate(layers)  # graph_time divides by the launch count
                                   for f in (lambda l=l, x=xs[i % 4]: pre(l, x), reads[i])])
            t_ours = graph_time([lambda l=l, x=xs[i % 4]: ours(l, x) for i, l in enumerate(layers)])
            t_gemm = graph_time([gemm(l, xs[i % 4]) for i, l in enumerate(layers)])
            roof = nbytes / bw * 1e6
            for path, us in (("floor_read", read), ("floor_pre", t_pre), ("floor_pair", pair), ("gemm_m1", t_gemm),
                             ("ours_m1", t_ours)):
                row = {"date": date, "gpu": gpu, "method": method, "path": path, "N": n, "K": k, "M": 1,
                       "us": round(us, 2), "roofline_us": round(roof, 2), "cublas_bf16_us": round(cub, 2),
                       "gemlite_us": None, "tinygemm_us": None, "read_tile": list(tile), "run": args.run}
                jl.write(json.dumps(row) + "\n")
            print(f"{method:9s} {name:8s} {nbytes / 1e6:7.1f} MB roof={roof:6.1f} read={read:6.1f} ({read / roof:.2f}x, "
                  f"{tile}) pre={t_pre:5.1f} pair={pair:6.1f} gemm={t_gemm:6.1f} ours={t_ours:6.1f} (ours/pair {t_ours / pair:.2f}, "
                  f"ours/read {t_ours / read:.2f}) cublas={cub:6.1f}", flush=True)
            del layers, bufs
            torch.cuda.empty_cache()
    jl.close()


if __name__ == "__main__":
    main()
