"""Where the W4A16 prefill time goes on the dequant-to-scratch + cuBLAS path (one device call):
each step of `paro_scratch.forward` timed alone under CUDA graphs (weight copies > L2),
beside the whole forward and cuBLAS bf16 on the same shape.

    python3 bench/probes/prefill_breakdown.py --ms 512,2048 --shapes gate_up,down
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # bench/: the probes share its helpers

import math

import torch

from bench_paro import ROTATE_BYTES, each_shape, paro_layers, shape_args, share_weights
from timing import graph_time

from radiance.kernels import paro_ops as ops
from radiance.kernels.nvidia import pool
from radiance.kernels.triton import paro_scratch
from radiance.kernels.triton import paro_rotate as pr


def main() -> None:
    args = shape_args("gate_up,down,qkv,out", "512,2048")
    gen = torch.Generator(device="cuda").manual_seed(0)
    for name, sizes, k, n in each_shape(args.shapes):
        copies = max(2, math.ceil(ROTATE_BYTES / (n * k * 4.25 / 8)))
        layers = share_weights(paro_layers(sizes, k, 1, gen, False)[0], copies)
        deq = pool.get(layers[0].wb.device).deq[: n * k].view(n, k)
        wbf = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
               for _ in range(max(2, math.ceil(ROTATE_BYTES / (2 * n * k))))]
        for m in map(int, args.ms.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            a = pr.rotate(x, layers[0].tables, pr.PLAIN)[0][0]
            y16 = a @ deq.t()
            steps = {
                "forward": [lambda l=l: ops.forward(l, x) for l in layers],
                "prologue": [lambda l=l: pr.rotate(x, l.tables, pr.PLAIN) for l in layers],
                "dequant": [lambda l=l: paro_scratch.dequant(l.wb, l.sc, l.d, deq) for l in layers],
                "mm_fp16": [lambda: a @ deq.t()] * 4,
                "cast_bf16": [lambda: y16.to(torch.bfloat16)] * 4,
                "cast_bf16_triton": [lambda: paro_scratch.cast(y16, torch.bfloat16)] * 4,
                "cublas_bf16": [lambda w=w: x @ w.t() for w in wbf],
            }
            res = {s: graph_time(f) for s, f in steps.items()}
            print(f"{name} N={n} K={k} M={m}: " + " ".join(f"{s}={u:.1f}" for s, u in res.items()), flush=True)


if __name__ == "__main__":
    main()
