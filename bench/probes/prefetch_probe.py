"""EXPERIMENT: the rotation prologue prefetching into L2 the first weight groups of each split-K range
of the GEMM after it (PF_MB megabytes), against no prefetch, per 27B layer (µs per forward in a
CUDA graph over weight copies past L2)."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # bench/
from bench_paro import ROTATE_BYTES, SHAPES, share_weights  # noqa: E402
from timing import graph_time  # noqa: E402

from radiance.kernels import paro_ops as ops  # noqa: E402
from radiance.testing import paro_random as rnd  # noqa: E402

gen = torch.Generator(device="cuda").manual_seed(0)
for name in sys.argv[1].split(","):
    sizes, k = SHAPES[name]
    base = ops.prepare(*rnd.merged([rnd.random_layer(n, k, gen) for n in sizes]))
    layers = share_weights(base, max(2, ROTATE_BYTES // base.wb.numel()))
    for m in map(int, sys.argv[2].split(",")):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        os.environ["PF_MB"] = "0"
        ref = ops.forward(base, x)
        cells = []
        for mb in sys.argv[3].split(","):
            os.environ["PF_MB"] = mb
            assert torch.equal(ops.forward(base, x), ref)
            cells.append(f"{mb} MB {graph_time([lambda lyr=lyr: ops.forward(lyr, x) for lyr in layers]):6.2f}")
        t = ops.tile_for(base, m)
        print(f"{name:11s} M={m} split={t.split} | " + " | ".join(cells), flush=True)
    del layers, base
    torch.cuda.empty_cache()
