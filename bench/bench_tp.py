"""Decode-step time of the 27B-class 2-layer block at TP=1 and TP=2 (NCCL), and TP=2 == TP=1.

Needs the device kind nvidia-h200-x2 (one process per GPU). NVLink multicast stays off:
`tp_block.join_rank` forces NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
NVSHMEM_DISABLE_NVLS=1 in each rank before NCCL starts.
Run:  python3 bench/bench_tp.py --out $OUT/tp.jsonl
Each step is timed under a CUDA graph (launch overhead removed), median of 200 replays.
"""

from __future__ import annotations

import argparse
import datetime
import json

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from radiance.testing import tp_block
from radiance.testing.servers import free_port
from timing import graph_time  # bench/timing.py


def _input(m: int) -> torch.Tensor:
    return torch.randn(m, tp_block.Dims().hidden, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)


def _rank(rank: int, world: int, port: int, method: str, ms: list[int], q) -> None:
    dev = tp_block.join_rank(rank, world, port, "nccl")
    dims = tp_block.Dims()
    layers = tp_block.rank_layers(method, dims, rank, world, dev)
    out = {}
    for m in ms:
        x = _input(m).to(dev)
        y = tp_block.block_forward(layers, x, dims, world)
        us = graph_time([lambda: tp_block.block_forward(layers, x, dims, world)], iters=200)
        out[m] = {"y": y.float().cpu().numpy(), "us": us}  # numpy pickles by value; a tensor would
        # travel as a shared-memory handle that dies with this process
    if rank == 0:
        q.put(out)
    if world > 1:
        dist.destroy_process_group()


def run(method: str, ms: list[int], world: int) -> dict:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, port, method, ms, q)) for r in range(world)]
    for p in procs:
        p.start()
    res = q.get()
    for p in procs:
        p.join()
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    gpu = torch.cuda.get_device_name(0)
    failed = 0
    with open(args.out, "w") as f:
        for method in ("paroquant", "pq2"):
            ms = [1, 8, 64]
            t1, t2 = run(method, ms, 1), run(method, ms, 2)
            refs = tp_block.reference_forward(method, tp_block.Dims(), 7, [_input(m) for m in ms], "cuda:0")
            for m, ref in zip(ms, refs):
                r1, r2 = t1[m], t2[m]
                y1, y2 = torch.from_numpy(r1["y"]), torch.from_numpy(r2["y"])
                row = {"date": datetime.date.today().isoformat(), "gpu": gpu, "method": method, "path": "tp_block",
                       "M": m, "tp1_us": r1["us"], "tp2_us": r2["us"], **tp_block.compare_tp(method, y1, y2, ref)}
                failed += not row["ok"]
                print(json.dumps(row), flush=True)
                f.write(json.dumps(row) + "\n")
    if failed:
        raise SystemExit(f"{failed} row(s) failed the TP=2 == TP=1 gate (tp_block.compare_tp)")


if __name__ == "__main__":
    main()
