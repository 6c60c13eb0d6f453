"""Does the weights' layout cost the decode GEMM its read rate? (one device call)

`mma_gl` (paroquant) reads, per program, BN rows x 64 bytes of one group, then the same rows of
the next group N x 64 bytes further on: `gps` separate runs of BN x 64 bytes. Its M = 1 GEMM alone
reads at ~0.7x the rate of bench/floor.py's streaming read of the same bytes on the H200.
This times a plain read of the layer's bytes in exactly that pattern (same grid, same tile, a
cp.async pipeline of `stages`) against the same read with each program's bytes contiguous
(block-major: [N / BN, G, BN, 64 B], as pq2 lays out its weights for its GEMV), and the streaming floor.

    python bench/probes/read_pattern.py --out DIR
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # bench/: the probes share its helpers

import argparse
import datetime
import itertools
import json
import os

import torch
import triton
import triton.language as tl
from floor import best_read  # bench/
from timing import graph_time

SHAPES = {"gate_up": (34816, 5120, 128, 2), "down": (5120, 17408, 64, 8), "qkv": (14336, 5120, 64, 4),
          "out": (5120, 6144, 64, 8)}  # N, K, the table's BN and split at M = 1


@triton.jit
def tile_read(W, OUT, N, G, gps, BN: tl.constexpr, BLOCK_MAJOR: tl.constexpr, STAGES: tl.constexpr):
    # one program = one (row block, split): its groups' [BN, 16] int32 tiles xor-ed (every load live)
    nb = tl.program_id(0)
    g0 = tl.program_id(1) * gps
    g1 = tl.minimum(g0 + gps, G)
    off = tl.arange(0, BN)[:, None] * 16 + tl.arange(0, 16)[None, :]
    acc = tl.zeros([BN, 16], tl.int32)
    for g in tl.range(g0, g1, num_stages=STAGES):
        if BLOCK_MAJOR:
            base = (nb * G + g) * (BN * 16)
        else:
            base = g * N * 16 + nb * (BN * 16)
        acc ^= tl.load(W + base + off)
    tl.store(OUT + nb * tl.num_programs(1) + tl.program_id(1), tl.xor_sum(tl.xor_sum(acc, 1), 0))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--run", type=int, default=None)
    args = ap.parse_args()
    dev = torch.cuda.get_device_properties(0)
    gpu = f"{dev.name} sm_{dev.major}{dev.minor} {dev.multi_processor_count} SMs"
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    out = torch.empty(1 << 20, dtype=torch.int32, device="cuda")
    jl = open(os.path.join(args.out, "results.jsonl"), "a")
    for name in args.shapes.split(","):
        n, k, bn, split = SHAPES[name]
        g = k // 128
        nbytes = n * k // 2  # the weight words only (the scales and zeros ride along in the GEMM)
        copies = max(2, -(-(200 << 20) // nbytes))
        bufs = [torch.empty(nbytes // 4, dtype=torch.int32, device="cuda").random_() for _ in range(copies)]
        floor, tile = best_read(bufs, out)
        print(f"{name}: {nbytes / 1e6:.1f} MB, streaming floor {floor:.1f} us ({tile})", flush=True)
        for split_, stages, block in itertools.product(sorted({split, 2 * split, max(1, split // 2)}), (2, 3, 4),
                                                       (False, True)):
            gps = -(-g // split_)
            grid = (n // bn, -(-g // gps))
            fns = [lambda b=b: tile_read[grid](b, out, n, g, gps, BN=bn, BLOCK_MAJOR=block, STAGES=stages,
                                               num_warps=4 if bn == 128 else 2) for b in bufs]
            us = graph_time(fns)
            layout = "block-major" if block else "group-major"
            print(f"   split {split_:2d} stages {stages} {layout:11s} {us:6.1f} us ({us / floor:.2f}x floor)", flush=True)
            jl.write(json.dumps({"date": date, "gpu": gpu, "method": "paroquant", "path": f"read_{layout}", "N": n,
                                 "K": k, "M": 1, "us": round(us, 2), "floor_read_us": round(floor, 2), "bn": bn,
                                 "split": split_, "stages": stages, "run": args.run}) + "\n")
        del bufs
        torch.cuda.empty_cache()
    jl.close()


if __name__ == "__main__":
    main()
