"""Prologue tile sweep (one device call): rows per program x warps for each output mode at
prefill and small-batch M, P = 1 and 3, K = 5120 and 17408 -- CUDA-graph medians, random data.
From M = 64 also the tensor-core path (`rotate(dense=True)`: bf16 group matrices, two dots per group).

    python3 bench/probes/sweep_prologue.py --out $OUT     # writes $OUT/sweep-prologue.jsonl
"""

from __future__ import annotations

import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1]))  # bench/: the probes share its helpers

import argparse
import itertools
import json
import os

import torch

from timing import graph_time

from radiance.testing import paro_random as rnd
from radiance.kernels.triton import paro_rotate as pr

MODES = {"plain": (pr.PLAIN, torch.float16), "f16g": (pr.F16G, torch.float16), "i8g": (pr.I8G, torch.int8)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--ms", default="16,512,2048")
    ap.add_argument("--modes", default="plain,i8g")
    ap.add_argument("--table-only", action="store_true", help="gathers: only the table's tile (dense: all)")
    args = ap.parse_args()
    gen = torch.Generator(device="cuda").manual_seed(0)
    for parts, k in ((1, 5120), (3, 5120), (1, 17408)):
        tab = pr.build_tables([rnd.rotation_of(rnd.random_layer(128, k, gen)) for _ in range(parts)])
        for m, mode in itertools.product(map(int, args.ms.split(",")), args.modes.split(",")):
            code, dt = MODES[mode]
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            out = (torch.empty(parts, m, k, device="cuda", dtype=dt),
                   torch.empty(parts, m, k // 128, device="cuda"), torch.empty(parts, m, k // 128, device="cuda"))
            res = []
            gathers = [(False, bm, w) for bm, w in itertools.product((4, 8, 16, 32, 64), (1, 2, 4, 8))
                       if bm <= max(16, m) and bm * 128 >= 32 * w
                       and (not args.table_only or (bm, w) == pr.prologue_tile(m))]
            dense = [(True, bm, w) for bm, w in itertools.product((64, 128, 256), (4, 8))] if m >= 64 else []
            for dn, bm, warps in gathers + dense:
                try:
                    us = graph_time([lambda: pr.rotate(x, tab, code, out, bm=bm, warps=warps, dense=dn)] * 20)
                except Exception as e:  # noqa: BLE001 -- reported, the sweep goes on
                    print(f"# P={parts} K={k} M={m} {mode} dense={dn} bm={bm} warps={warps}: {type(e).__name__}",
                          flush=True)
                    continue
                res.append((us, bm, warps, dn))
                with open(os.path.join(args.out, "sweep-prologue.jsonl"), "a") as f:
                    f.write(json.dumps({"P": parts, "K": k, "M": m, "mode": mode, "dense": dn, "bm": bm, "warps": warps,
                                        "us": round(us, 2), "table": not dn and (bm, warps) == pr.prologue_tile(m)})
                            + "\n")
            res.sort()
            table = [u for u, b, w, dn in res if not dn and (b, w) == pr.prologue_tile(m)]
            print(f"P={parts} K={k} M={m} {mode}: gather table {table} best " +
                  " ".join(f"{u:.1f}({'dense ' if dn else ''}bm{b},w{w})" for u, b, w, dn in res[:6]), flush=True)


if __name__ == "__main__":
    main()
