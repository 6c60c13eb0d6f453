"""The one-launch decode linear (mma_gl rotating its own activations, paro_coop_gluon) against the
shipped two launches (prologue + mma_gl), per 27B layer at M = 1..8: numbers first (the same
F16GF codes, so y should match to the split-K order), then µs per call in a CUDA graph over weight
copies past L2.

    python3 bench/probes/coop_probe.py [--shapes out,qkv_P3,down,gate_up_P2] [--ms 1,4,8]
"""

from __future__ import annotations

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # bench/
from bench_paro import ROTATE_BYTES, SHAPES, share_weights  # noqa: E402
from timing import graph_time  # noqa: E402

from radiance.kernels import paro_ops as ops  # noqa: E402
from radiance.kernels.triton import paro_rotate as pr  # noqa: E402
from radiance.testing import paro_random as rnd  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="out,qkv_P3,down,gate_up_P2")
    ap.add_argument("--ms", default="1,2,4,8")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name in args.shapes.split(","):
        sizes, k = SHAPES[name]
        base = ops.prepare(*rnd.merged([rnd.random_layer(n, k, gen) for n in sizes]))
        count = max(2, ROTATE_BYTES // base.wb.numel())
        layers = share_weights(base, count)
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            ref = ops.forward(base, x).float()
            outs = [ops.forward_coop(base, x).float() for _ in range(3)]
            rel = max(((o - ref).abs().max() / ref.abs().max()).item() for o in outs)
            same = all(torch.equal(o, outs[0]) for o in outs)
            # in a graph, replayed: the counters must reset between replays
            xs = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                yg = ops.forward_coop(base, xs)
            for _ in range(3):
                xs.copy_(torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen))
                g.replay()
                rg = ((yg.float() - ops.forward(base, xs).float()).abs().max()
                      / ops.forward(base, xs).float().abs().max()).item()
                rel = max(rel, rg)
            two = graph_time([lambda lyr=lyr: ops.forward(lyr, x) for lyr in layers])
            one = graph_time([lambda lyr=lyr: ops.forward_coop(lyr, x) for lyr in layers])
            os.environ["COOPV"] = "2"
            nowait = graph_time([lambda lyr=lyr: ops.forward_coop(lyr, x) for lyr in layers])
            os.environ["COOPV"] = "3"
            first = graph_time([lambda lyr=lyr: ops.forward_coop(lyr, x) for lyr in layers])
            os.environ["COOPV"] = "1"
            t = ops.tile_for(base, m)
            a, s, rs = pr.rotate(x, base.tables, pr.F16GF)
            gemm = graph_time([lambda lyr=lyr: ops.gemm_rotated(lyr, a, s, rs, x.dtype, t) for lyr in layers])
            print(f"{name:11s} M={m} tile bn={t.bn} w={t.warps} split={t.split} | two launches {two:6.2f} us"
                  f" | one launch {one:6.2f} us | x{two / one:4.2f} | the GEMM alone {gemm:6.2f} us | no waits {nowait:6.2f} | jobs first {first:6.2f} | max rel {rel:.2e} repeat-equal {same}",
                  flush=True)
        del layers, base
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
