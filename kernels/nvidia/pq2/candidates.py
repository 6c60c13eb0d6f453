"""The pq2 tuning space: the tiles bench/bench_pq2.py --sweep times per kernel and tile class (and
test_pq2_gpu checks exactly); its winners land in tiles/<arch>.json (kernels/nvidia/tile.py)."""

from __future__ import annotations

from radiance.kernels.nvidia.tile import Tile

# the tuning space bench/bench_pq2.py --sweep times (and test_pq2_gpu checks exactly)
CANDIDATES: dict[str, list[Tile]] = {
    "dp4a": [Tile(bn=32, gpi=8, warps=8), Tile(bn=16, gpi=8, warps=4), Tile(bn=64, gpi=8, warps=8), Tile(bn=8, gpi=16, warps=4),
             Tile(bn=16, gpi=8, warps=4, split=2), Tile(bn=8, gpi=8), Tile(bn=4, gpi=16), Tile(bn=32, gpi=8, warps=4),
             Tile(bn=8, gpi=16, split=2)]
    # the [BN, GPI, 8] tile on the block-major weights puts the warps across groups
    + [Tile(bn=16, gpi=8, warps=8), Tile(bn=16, gpi=16, warps=8), Tile(bn=32, gpi=16, warps=8),
       Tile(bn=16, gpi=8, warps=8, split=2), Tile(bn=16, gpi=16, warps=8, split=2), Tile(bn=16, gpi=8, warps=8, split=4),
       Tile(bn=64, gpi=8, warps=8, split=2)]
    # warps >= groups per step keep the activations in the tile's layout (1 conversion in the loop,
    # 6 for down's 8 x 16 x 4 warps; offline TTGIR)
    + [Tile(bn=8, gpi=16, warps=8), Tile(bn=8, gpi=8, warps=8), Tile(bn=8, gpi=16, warps=8, split=2)]
    # rr row sub-tiles per program, each activation load serving rr weight words per thread
    + [Tile(bn=16, gpi=8, rr=2), Tile(bn=32, gpi=8, rr=4), Tile(bn=32, gpi=8, rr=2), Tile(bn=16, gpi=16, warps=8, rr=2),
       Tile(bn=32, gpi=16, warps=8, rr=4), Tile(bn=64, gpi=8, warps=8, rr=4), Tile(bn=32, gpi=8, rr=4, split=2),
       Tile(bn=32, gpi=16, warps=8, rr=4, split=2)],
    "m1": [],
    "small": [Tile(bn=256, bm=16, split=s) for s in (1, 2, 4, 8)] + [Tile(bn=128, bm=16, split=s) for s in (4, 8)]
    + [Tile(bn=64, bm=16, split=s) for s in (2, 4, 8)]  # more programs in flight: the paroquant deq lesson
    + [Tile(bn=256, bm=16, split=4, one_dot=True), Tile(bn=128, bm=16, split=4, one_dot=True),
       Tile(bn=128, bm=16, split=8, one_dot=True)]
    # two stages won the prefill tile (more programs per SM); tried here too
    + [Tile(bn=128, bm=16, split=s, stages=2, one_dot=True) for s in (4, 8)],
    "mid": [Tile(bn=64, bm=64, split=2), Tile(bn=64, bm=64), Tile(bn=64, bm=64, split=2, one_dot=True),
            Tile(bn=64, bm=64, one_dot=True)]
    # narrower token blocks and more programs (the small band's tiles re-read each weight byte
    # per token block from L2, but keep more groups in flight)
    + [Tile(bn=bn, bm=bt, split=s, one_dot=True) for bn, bt, s in
       ((128, 16, 4), (128, 32, 2), (128, 32, 4), (64, 32, 2), (64, 32, 4), (64, 64, 4))]
    + [Tile(bn=128, bm=64, warps=8, split=2, one_dot=True), Tile(bn=64, bm=64, stages=4, split=2, one_dot=True)]
    + [Tile(bn=128, bm=32, split=s, stages=2, one_dot=True) for s in (2, 4)]
    # 128x32 takes 156 registers (3 programs per SM; 64x64 takes 232: 2); capped at 128: 4 programs,
    # for 984 instructions instead of 928 and 72 stack bytes
    + [Tile(bn=128, bm=32, split=s, one_dot=True, maxnreg=128) for s in (2, 4)],
    "prefill": [Tile(bn=64, bm=128), Tile(bn=64, bm=128, one_dot=True), Tile(bn=128, bm=64, one_dot=True),
                Tile(bn=128, bm=128, one_dot=True), Tile(bn=64, bm=128, stages=4, one_dot=True),
                Tile(bn=64, bm=128, warps=8, one_dot=True), Tile(bn=64, bm=64, one_dot=True),
                Tile(bn=128, bm=64, warps=8, one_dot=True), Tile(bn=64, bm=128, stages=2, one_dot=True),
                Tile(bn=64, bm=128, stages=1, one_dot=True), Tile(bn=128, bm=64, stages=2, one_dot=True)]
    # the 64x128 tile takes 233 registers per thread: 2 programs per SM (offline sm_90 SASS); capped
    # at 168 / 128: 3 / 4 programs, for 1000 / 1176 instructions (864) and 208 / 424 stack bytes
    + [Tile(bn=64, bm=128, stages=2, one_dot=True, maxnreg=r) for r in (168, 128)],
    # the DP4A GEMV with mr token rows per program (small band, M = 2..8)
    "dp4a_rows": [Tile(bn=64, gpi=8, warps=8, mr=2), Tile(bn=32, gpi=8, warps=8, mr=2), Tile(bn=64, gpi=8, warps=8, mr=4),
                  Tile(bn=32, gpi=8, warps=8, mr=4), Tile(bn=8, gpi=16, mr=2), Tile(bn=8, gpi=16, mr=4),
                  Tile(bn=16, gpi=8, warps=4, mr=4)],
    # Gluon mma.sync (pq2_gluon): bn = weight rows (16 x warps x a power of two), bm = 8 or 16
    # tokens (the sweep times bm 16 only above M = 8); the weights of the next gpi groups in
    # registers (stages 1) or `stages` groups through a cp.async ring (gpi 1).
    # Gluon async wgmma (pq2_gluon_wgmma, sm_90, M > 16): bn = 64 x warpgroups x a power of two, bm
    # tokens, `stages` >= 3 ring stages; no split-K.
    "gluon_wgmma": [Tile(bn=bn, bm=bt, warps=w, stages=st) for bn, w, bt in
                    ((64, 4, 64), (128, 4, 64), (128, 8, 128), (256, 8, 64)) for st in (4, 6, 8)]
    # narrow token tiles for M = 17..64
    + [Tile(bn=bn, bm=32, warps=4, stages=4) for bn in (64, 128)],
    # the warp-specialized wgmma kernel (pq2_gluon_ws, sm_90, M > 16): bn rows of one 128-row weight
    # block, bm tokens, `stages` ring stages fed by one loader warp; maxnreg caps the registers per
    # thread before the partitions re-split them (80: 3 programs per SM, 128: 2).
    "gluon_ws": [Tile(bn=bn, bm=bt, warps=4, stages=4, maxnreg=r) for bn, bt, r in
                 ((128, 64, 128), (64, 64, 80), (128, 32, 128), (64, 32, 80))],
    "gluon": [Tile(bn=bn, bm=bt, gpi=gu, warps=w, split=s, stages=st) for bt in (8, 16)
              for bn, w in ((64, 4), (128, 4), (256, 4), (256, 8)) for s in (1, 2, 4, 8)
              for gu, st in ((1, 1), (2, 1), (1, 4), (1, 8))]
    # the same on stream-K grids: every SM holds `persist` programs sharing all (tile, group) steps
    # (a tiles x splits grid leaves a wave partly empty: gate_up's 272 tiles fill 2.06 of an SM's 4 slots)
    + [Tile(bn=bn, bm=8, gpi=gu, warps=4, stages=st, persist=q) for bn in (64, 128) for gu, st in ((1, 1), (2, 1), (1, 4))
       for q in (2, 3, 4, 6)],
}
