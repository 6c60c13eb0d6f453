"""ncu target: the pq2 M = 1 DP4A GEMV (table tiles) on gate_up and out, and bench/floor.py's
streaming read of gate_up's weight bytes, three launches each.

    ncu --clock-control none -k regex:"pq2_gemv|stream_read" -c 9 --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis python3 bench/profile_pq2.py
"""

import sys

import torch

sys.path.insert(0, "bench")
from bench_pq2 import make_layers  # noqa: E402
from floor import READ_TILES, read_fn  # noqa: E402

from radiance.kernels import pq2_ops  # noqa: E402

for n, k in ((34816, 5120), (5120, 6144)):
    (layer, _), = make_layers(n, k, 1)
    x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        pq2_ops.forward(layer, x)
buf = torch.empty((34816 * 5120 // 4 + 34816 * 40 * 2) // 4, dtype=torch.int32, device="cuda").random_()
out = torch.empty(1 << 20, dtype=torch.int32, device="cuda")
assert (1024, 1, 8) in READ_TILES
for _ in range(3):
    read_fn(buf, out, (1024, 1, 8))()
torch.cuda.synchronize()
print("done")
