"""ncu target: the paroquant decode kernels on gate_up (M=1 gemv, M=4 deq), three launches each.

    ncu --clock-control none -k regex:"_paro_(gemv|deq)" -c 4 --section SpeedOfLight \
        --section Occupancy --section LaunchStats --section WarpStateStats python3 bench/profile_paro.py
"""

import torch

from radiance.kernels import paro_ops as ops
from radiance.kernels.triton import paro_random as rnd

gen = torch.Generator(device="cuda").manual_seed(0)
layer = ops.prepare(*rnd.merged([rnd.random_layer(34816, 5120, gen)]))
for m in (1, 4):
    x = torch.randn(m, 5120, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        ops.forward(layer, x)
torch.cuda.synchronize()
print("tile M=1", ops.tile_for(layer, 1), "M=4", ops.tile_for(layer, 4))
