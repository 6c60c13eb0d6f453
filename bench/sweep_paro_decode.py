"""Decode-band tile sweep for the paroquant GEMMs (one device call): the `--kinds` tiles (Gluon
`gemv_gl` at M <= 4 by default; the Triton `gemv` at M = 1; `deq` split/BN at M > 1) beside the
table's tile and, at M = 1, the Triton gemv's table tile (the paired "before"), whole forward
(prologue + GEMM) timed as in bench_paro.py (CUDA graph, weight copies > L2), with cuBLAS bf16 and
the 4.25-bit copy roofline of the same run in every row. Prints one line per tile and the best per
shape.

    python3 bench/sweep_paro_decode.py --out $OUT      # writes $OUT/sweep-paro.jsonl
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os

import torch

from bench_paro import ROTATE_BYTES, SHAPES, paro_layers, share_weights
from timing import copy_bandwidth, graph_time

from radiance.kernels import paro_ops as ops
from radiance.kernels.nvidia import pool


def tiles(m: int, n: int, groups: int, sms: int, kinds: str):
    if m == 1 and "gemv_gl" in kinds:  # BN = R columns per thread x 8 lanes x warps; stages - 1 = prefetch level
        for (r, warps), stages, gpi, split in itertools.product(((1, 2), (2, 2), (4, 2), (1, 4), (2, 4), (4, 4), (2, 1)),
                                                                (2, 3), (1, 2), (2, 3, 4, 6, 8)):
            if groups % gpi == 0:
                yield ops.Tile(1, 8 * r * warps, warps, stages, split, "gemv_gl", gpi)
    if 1 < m <= 4 and "gemv_gl" in kinds:  # MR rows per program share each decoded weight word
        for mr, (r, warps), stages, split in itertools.product((2,) if m == 2 else (2, 4),
                                                               ((1, 4), (2, 4), (2, 2), (4, 4)), (2, 3), (2, 4, 6, 8)):
            yield ops.Tile(mr, 8 * r * warps, warps, stages, split, "gemv_gl", 1)
    mr = 1 if m == 1 else 2 if m == 2 else 4
    if m <= 4 and "gemv_deep" in kinds:  # gemv_gl with the weights stages - 2 steps ahead in registers
        for (r, warps), stages, split in itertools.product(((1, 4), (2, 4), (4, 4)), (4, 5, 6), (4, 8, 12, 16)):
            yield ops.Tile(mr, 8 * r * warps, warps, stages, split, "gemv_gl", 1)
    if m <= 16 and "mma_gl" in kinds:  # tensor-core decode: 8 or 16 tokens per program, m16 row tiles per warp
        for (warps, rt), split in itertools.product(((4, 1), (4, 2), (2, 1), (2, 2), (4, 4), (8, 1)), (1, 2, 4, 8, 16)):
            yield ops.Tile(8 if m <= 8 else 16, 16 * warps * rt, warps, 1, split, "mma_gl")
    if m <= 16 and "mma_ring" in kinds:  # mma_gl through a cp.async ring (stages 3+: everything, not only the weights)
        # 8 warps per program (twice the warps per scheduler at the same grid -- ncu had one eligible
        # warp per scheduler) never won, nor did 2 stages (weights only): neither is swept
        # above M = 8 also 8-token tiles: two programs per weight tile, launched next to each other
        # (the token tile is the fastest grid index), the second reading the weights from L2
        for bt, (warps, rt), stages, split in itertools.product((8,) if m <= 8 else (8, 16), ((4, 1), (4, 2), (2, 2), (2, 1)),
                                                                (3, 4), (1, 2, 4, 8, 16)):
            yield ops.Tile(bt, 16 * warps * rt, warps, stages, split, "mma_gl")
    if m <= 8 and "mma_deep" in kinds:  # rings deeper than the table's 4 stages: a short split's groups all in flight
        for (warps, rt), stages, split in itertools.product(((2, 1), (4, 1), (2, 2)), (4, 6, 8), (1, 2, 4, 8)):
            yield ops.Tile(8, 16 * warps * rt, warps, stages, split, "mma_gl")
    if m <= 16 and "mma_sk" in kinds:  # stream-K: a few programs per SM share all (tile, group) steps equally
        for (bn, warps), per_sm in itertools.product(((128, 4), (64, 2)), (2, 3, 4, 5, 6, 8)):
            # (offline SASS, sm_90: the stream-K loop takes 121 registers at 8 tokens on BN 128 / 4 warps,
            # 91 capped at 96 without spills -- 5 programs per SM; 165 at 16 tokens: 3)
            t = ops.Tile(8 if m <= 8 else 16, bn, warps, 4 if m <= 8 else 3, 1, "mma_gl",
                         maxnreg=96 if m <= 8 and bn == 128 else 0)
            yield ops.stream_tile(t, m, n, groups, sms, per_sm)
        yield ops.Tile(8 if m <= 8 else 16, 128, 4, 4 if m <= 8 else 3, 2, "mma_gl")  # split-K, for reference
    if m <= 16 and "mma_wide" in kinds:  # 256 weight rows per program: each activation fetch shared by twice the rows
        for (warps, rt), stages, split in itertools.product(((8, 2), (4, 4)), (3, 4), (1, 2, 4)):
            yield ops.Tile(8 if m <= 8 else 16, 16 * warps * rt, warps, stages, split, "mma_gl")
    if 8 < m <= 16 and "mma_cap" in kinds:  # the 16-token ring tile with its registers capped (142 -> 128: 4 programs per SM)
        # (offline SASS, sm_90: BN 128 on 4 warps fits 128 without spills; BN 64 on 4 warps takes 100
        # uncapped, on 2 warps 154 and spills under 128)
        for stages, split in itertools.product((3, 4), (2, 4, 8, 16)):
            yield ops.Tile(16, 128, 4, stages, split, "mma_gl", maxnreg=128)
    if m == 1 and "gemv," in kinds + ",":
        for bn, warps, stages, gpi, split in itertools.product((16, 32, 64), (2, 4), (1, 2), (1, 2, 4), (1, 2)):
            if groups % gpi == 0 and bn * 16 >= 32 * warps:
                yield ops.Tile(1, bn, warps, stages, split, "gemv", gpi)
    if m > 1 and "deq," in kinds + ",":
        bm = max(16, 1 << (m - 1).bit_length())
        for bn, warps, stages, split in itertools.product((32, 64, 128), (4,), (3, 4), (1, 2, 4)):
            yield ops.Tile(bm, bn, warps, stages, split, "deq")
    if m > 64 and "deqt" in kinds:  # prefill: BN = the wgmma's M side (64 rows per warp group), BM its N side
        for bm, bn, warps, stages in ((128, 128, 8, 3), (256, 128, 8, 3), (128, 256, 8, 3), (128, 128, 4, 4),
                                      (256, 64, 4, 3), (256, 128, 8, 4), (128, 256, 8, 4), (64, 256, 8, 4),
                                      (256, 256, 8, 2), (128, 128, 8, 4), (256, 128, 4, 3)):
            yield ops.Tile(bm, bn, warps, stages, 1, "deqt")
    elif m > 1 and "deqt" in kinds:  # BN = the wgmma's M side: 64 rows per warp group
        bm = max(16, 1 << (m - 1).bit_length())
        for (bn, warps), stages, split in itertools.product(((64, 4), (128, 4), (128, 8), (256, 8)), (3, 4, 5),
                                                            (1, 2, 4, 8)):
            yield ops.Tile(bm, bn, warps, stages, split, "deqt")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--shapes", default="gate_up,down")
    ap.add_argument("--ms", default="1,4")
    ap.add_argument("--kinds", default="gemv_gl",
                    help="kinds swept (comma list): gemv_gl, gemv_deep (M <= 4), mma_gl, mma_ring (M <= 16), mma_deep (M <= 8), mma_cap (M = 9..16), mma_wide, mma_sk (M <= 16), "
                         "gemv (M = 1), "
                         "deq, deqt (M > 1)")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    path = os.path.join(args.out, "sweep-paro.jsonl")
    bw = max(copy_bandwidth(), copy_bandwidth())
    for name in args.shapes.split(","):
        sizes, k = SHAPES[name]
        n = sum(sizes)
        wbytes = n * k * 4.25 / 8
        layers = share_weights(paro_layers(sizes, k, 1, gen, False)[0], max(2, math.ceil(ROTATE_BYTES / wbytes)))
        roof = wbytes / bw * 1e6
        wbf = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) for _ in range(max(2, math.ceil(ROTATE_BYTES / (2 * n * k))))]
        for m in map(int, args.ms.split(",")):
            xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(4)]
            cub = graph_time([lambda w=w, x=xs[i % 4]: x @ w.t() for i, w in enumerate(wbf)])
            scratch = ops.kind_for(layers[0], m) == "scratch"
            table = ops.Tile(0, 0, 0, 0, kind="scratch") if scratch else ops.tile_for(layers[0], m)
            # the plain Triton gemv's tile: the paired "before"
            before = [ops.decode_tile("gemv", m, n, k // 128, layers[0].sms, layers[0].cap)] if m == 1 else []
            res = []
            for t in [table, *before, *tiles(m, n, k // 128, layers[0].sms, args.kinds)]:
                if t is not table:  # the layer reserved partials for its own splits only
                    pool.reserve(layers[0].wb.device, t.split * m * n)
                try:  # the table's choice runs as forward picks it (above the decode band: the scratch path)
                    us = graph_time([lambda l=l, x=xs[i % 4], t=t: ops.forward(l, x, tile=None if t is table else t)
                                     for i, l in enumerate(layers)])
                except Exception as e:  # noqa: BLE001 -- a tile that does not compile is reported and skipped
                    print(f"# {name} M={m} {t}: {type(e).__name__}", flush=True)
                    continue
                res.append((us, t))
                with open(path, "a") as f:
                    f.write(json.dumps({"shape": name, "N": n, "K": k, "M": m, "us": round(us, 2), "table": t is table,
                                        "tile": "scratch+cuBLAS" if t is table and scratch else str(t), "roofline_us": round(roof, 2),
                                        "cublas_bf16_us": round(cub, 2)}) + "\n")
            res.sort(key=lambda r: r[0])
            print(f"{name} M={m}: roof {roof:.1f} cuBLAS {cub:.1f} table {res and [u for u, t in res if t is table]} best:",
                  flush=True)
            for us, t in res[:6] if m <= 64 else res:
                print(f"   {us:7.1f}  {t}", flush=True)


if __name__ == "__main__":
    main()
