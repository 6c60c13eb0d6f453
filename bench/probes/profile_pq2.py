"""ncu target: the pq2 M = 1 DP4A GEMV (table tiles) on gate_up and out, and bench/floor.py's
streaming read of gate_up's weight bytes, three launches each; with arguments
`SHAPES M PATHS` (e.g. `gate_up 2048 gluon_wgmma,planes`) those paths' table tiles instead.

    ncu --clock-control none -k regex:"pq2_gemv|stream_read" -c 9 --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis python3 bench/probes/profile_pq2.py
"""

import sys

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))  # bench/
from bench_pq2 import make_layers  # noqa: E402
from floor import pq2_bytes, read_target  # noqa: E402

from radiance.kernels import pq2_ops  # noqa: E402

if len(sys.argv) > 3:
    from bench_pq2 import SHAPES  # noqa: E402

    m = int(sys.argv[2])
    for name in sys.argv[1].split(","):
        (layer, _), = make_layers(*SHAPES[name], 1)
        x = torch.randn(m, SHAPES[name][1], device="cuda", dtype=torch.bfloat16)
        for path in sys.argv[3].split(","):
            for _ in range(3):
                pq2_ops.forward(layer, x, path=path)
else:
    for n, k in ((34816, 5120), (5120, 6144)):
        (layer, _), = make_layers(n, k, 1)
        x = torch.randn(1, k, device="cuda", dtype=torch.bfloat16)
        for _ in range(3):
            pq2_ops.forward(layer, x)
    read_target(pq2_bytes(34816, 5120), 3)
torch.cuda.synchronize()
print("done")
