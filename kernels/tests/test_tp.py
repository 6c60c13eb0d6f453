"""TP=2 equals TP=1 for a 2-layer block in both formats (CPU, gloo, two processes).

Tolerance: the row-parallel layers sum two fp32 partial products in a different order than one
rank does, so TP=2 and TP=1 differ by reassociation only: rel <= 1e-5 in fp32 (measured ~1e-7).
The NCCL variant (marker gpu, needs 2 GPUs) runs the 27B-class block in bf16 with one process per
GPU; its tolerance is `tp_block.compare_tp` (stated there). bench/bench_tp.py times the same block.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from radiance.testing import tp_block
from radiance.kernels.formats import FormatError, shard
from radiance.testing.servers import free_port

DIMS = tp_block.SMALL
TOL = 1e-5


def _rank_main(rank: int, world: int, port: int, method: str, out: str, backend: str = "gloo") -> None:
    dev = tp_block.join_rank(rank, world, port, backend)
    dims, xs = (tp_block.Dims(), _gpu_inputs()) if backend == "nccl" else \
        (DIMS, [torch.randn(5, DIMS.hidden, generator=torch.Generator().manual_seed(3))])
    try:
        layers = tp_block.rank_layers(method, dims, rank, world, dev)
        ys = [tp_block.block_forward(layers, x.to(dev), dims, world).cpu() for x in xs]
        if rank == 0:
            torch.save(ys, out)
    finally:
        dist.destroy_process_group()


def _gpu_inputs() -> list[torch.Tensor]:
    # M = 1 (decode), 7 (odd), 64 (a batch); bf16 as the served model feeds them
    gen = torch.Generator().manual_seed(3)
    return [torch.randn(m, tp_block.Dims().hidden, generator=gen).to(torch.bfloat16) for m in (1, 7, 64)]


@pytest.mark.parametrize("method", ["paroquant", "pq2"])
def test_tp2_equals_tp1(tmp_path, method):
    y1 = tp_block.block_forward(
        [tp_block.shard_layer(method, w, 0, 1, torch.device("cpu"), i)
         for i, w in enumerate(tp_block.random_weights(method, DIMS, layers=2, seed=7))],
        torch.randn(5, DIMS.hidden, generator=torch.Generator().manual_seed(3)), DIMS, 1)
    out = str(tmp_path / "y2.pt")
    mp.start_processes(_rank_main, args=(2, free_port(), method, out), nprocs=2, join=True, start_method="spawn")
    (y2,) = torch.load(out)
    rel = float((y2 - y1).norm() / y1.norm())
    assert torch.isfinite(y2).all()
    assert rel <= TOL, f"TP=2 vs TP=1 rel {rel:.3g} > {TOL}"


@pytest.mark.gpu
@pytest.mark.parametrize("method", ["paroquant", "pq2"])
def test_tp2_equals_tp1_nccl(tmp_path, method):
    if torch.cuda.device_count() < 2:
        pytest.skip("needs 2 GPUs (device kind nvidia-h200-x2)")
    dims, dev = tp_block.Dims(), torch.device("cuda", 0)
    layers = [tp_block.shard_layer(method, w, 0, 1, dev, i)
              for i, w in enumerate(tp_block.random_weights(method, dims, layers=2, seed=7, device="cuda:0"))]
    xs = _gpu_inputs()
    y1s = [tp_block.block_forward(layers, x.to(dev), dims, 1).cpu() for x in xs]
    del layers
    torch.cuda.empty_cache()
    out = str(tmp_path / "y2.pt")
    mp.start_processes(_rank_main, args=(2, free_port(), method, out, "nccl"), nprocs=2, join=True, start_method="spawn")
    y2s = torch.load(out)
    refs = tp_block.reference_forward(method, dims, 7, xs, "cuda:0")
    for x, y1, y2, ref in zip(xs, y1s, y2s, refs):
        r = tp_block.compare_tp(method, y1, y2, ref)
        assert r["ok"], f"M={x.shape[0]}: {r}"


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
