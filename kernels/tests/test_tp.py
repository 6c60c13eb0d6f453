"""TP=2 equals TP=1 for a 2-layer block in both formats (CPU, gloo, two processes).

Tolerance: the row-parallel layers sum two fp32 partial products in a different order than one
rank does, so TP=2 and TP=1 differ by reassociation only: rel <= 1e-5 in fp32 (measured ~1e-7).
The GPU run (NCCL, 2 x H200) uses the same module: bench/bench_tp.py.
"""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from radiance.kernels import tp_block
from radiance.kernels.formats import FormatError, shard

DIMS = tp_block.SMALL
TOL = 1e-5


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, world: int, port: int, method: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        weights = tp_block.random_weights(method, DIMS, layers=2, seed=7)
        layers = [tp_block.shard_layer(method, w, rank, world, torch.device("cpu"), i) for i, w in enumerate(weights)]
        x = torch.randn(5, DIMS.hidden, generator=torch.Generator().manual_seed(3))
        y = tp_block.block_forward(layers, x, DIMS, world)
        if rank == 0:
            torch.save(y, out)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("method", ["paroquant", "pq2"])
def test_tp2_equals_tp1(tmp_path, method):
    y1 = tp_block.block_forward(
        [tp_block.shard_layer(method, w, 0, 1, torch.device("cpu"), i)
         for i, w in enumerate(tp_block.random_weights(method, DIMS, layers=2, seed=7))],
        torch.randn(5, DIMS.hidden, generator=torch.Generator().manual_seed(3)), DIMS, 1)
    out = str(tmp_path / "y2.pt")
    mp.start_processes(_rank_main, args=(2, _port(), method, out), nprocs=2, join=True, start_method="spawn")
    y2 = torch.load(out)
    rel = float((y2 - y1).norm() / y1.norm())
    assert torch.isfinite(y2).all()
    assert rel <= TOL, f"TP=2 vs TP=1 rel {rel:.3g} > {TOL}"


def test_row_shard_off_group_boundary_is_refused():
    w = tp_block.random_weights("paroquant", tp_block.Dims(hidden=384, q=384, kv=128, inter=384), 1, 0)[0]
    with pytest.raises(FormatError, match=r"layers.0.o \(paroquant K\): 384 does not split into 2 shards of a multiple of 128"):
        shard.paroquant_row(w["o"], 0, 2, "layers.0.o")


def test_row_shard_keeps_pairs_local():
    w = tp_block.random_weights("paroquant", DIMS, 1, 1)[0]["down"]
    for r in range(2):
        s = shard.paroquant_row(w, r, 2, "down")
        assert s.in_features == DIMS.inter // 2
        groups = s.pairs.view(s.krot, -1, 128).long()
        assert torch.equal(groups.sort(-1).values, torch.arange(128).expand_as(groups))
