"""ncu target: the paroquant decode kernels -- on gate_up the table's `mma_gl` (cp.async ring) at
M = 1, 8 and 16 and two other M = 1 tiles (`gemv_gl`, `mma_gl` with the register prefetch); on the
other shapes named in argv 1 (bench_pq2.SHAPES names, comma list; default gate_up) the table's tile
at M = 1 -- and bench/floor.py's streaming read of each layer's weight bytes, two launches each.
With `SHAPES M KIND:BM,BN,WARPS,STAGES` (e.g. `gate_up,down 2048 wgmma:256,128,8,3`) that tile on
those shapes instead, two launches each.

    ncu --clock-control none -k regex:"paro_(gemv|mma)_gl|stream_read" -c 10 --section SpeedOfLight \
        --section Occupancy --section WarpStateStats --section SchedulerStats \
        --section MemoryWorkloadAnalysis --section LaunchStats python3 bench/probes/profile_paro.py
"""

import sys

import torch

sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))  # bench/
from floor import paro_bytes, read_target  # noqa: E402

from radiance.kernels import paro_ops as ops  # noqa: E402
from radiance.testing import paro_random as rnd  # noqa: E402

from bench_pq2 import SHAPES  # noqa: E402

gen = torch.Generator(device="cuda").manual_seed(0)
if len(sys.argv) > 3:
    kind, dims = sys.argv[3].split(":")
    bm, bn, warps, stages = map(int, dims.split(","))
    for name in sys.argv[1].split(","):
        N, K = SHAPES[name]
        layer = ops.prepare(*rnd.merged([rnd.random_layer(N, K, gen)]))
        x = torch.randn(int(sys.argv[2]), K, device="cuda", dtype=torch.bfloat16)
        for _ in range(2):
            ops.forward(layer, x, ops.Tile(bm, bn, warps, stages, 1, kind))
        del layer
    torch.cuda.synchronize()
    sys.exit(print("done"))
for name in (sys.argv[1] if len(sys.argv) > 1 else "gate_up").split(","):
    N, K = SHAPES[name]
    layer = ops.prepare(*rnd.merged([rnd.random_layer(N, K, gen)]))
    cases = [(1, None)]
    if name == "gate_up":
        cases += [(1, ops.Tile(1, 128, 4, 3, 6, "gemv_gl")), (1, ops.Tile(8, 256, 4, 1, 8, "mma_gl")), (8, None), (16, None)]
    for m, tile in cases:
        x = torch.randn(m, K, device="cuda", dtype=torch.bfloat16)
        for _ in range(2):
            ops.forward(layer, x, tile)
        print(name, "M", m, "tile", tile or ops.tile_for(layer, m), flush=True)
    read_target(paro_bytes(N, K), 2)
    del layer
torch.cuda.synchronize()
print("done")
