"""One module per NVIDIA kernel kind (kernels/nvidia/<method>/<kind>.py): each owns its registry
entries, its activations, tile, shared memory and launch; `KERNELS` is built from the kinds alone;
every kind's tile is the one Tile, tuned per card in tiles/<arch>.json for every method; every
method's layers share one scratch pool."""

from __future__ import annotations

import json

import pytest
import torch

from radiance.kernels import methods
from radiance.kernels.nvidia import dense, mxfp4, paroquant, pool, pq2, tile
from radiance.kernels.nvidia.tile import Tile

PACKAGES = {"paroquant": paroquant, "pq2": pq2, "paroquant_mxfp4": mxfp4, "dense": dense}
# what each method's kinds expose beside NAME (None where a kind has none: a prefill-only kind's decode tile)
OWNS = {"paroquant": ("MODE", "W4A16_ONLY", "WORDS", "decode_tile", "prefill_tile", "smem", "launch"),
        "pq2": ("PLANES", "DEPENDENT", "tile", "launch"), "paroquant_mxfp4": ("tile", "smem", "launch"),
        "dense": ("linear",)}


@pytest.mark.parametrize("method", list(PACKAGES))
def test_kernels_is_the_kinds_in_priority_order(method):
    package = PACKAGES[method]
    assert methods.resolve(methods.get(method).platforms["cuda"].kernels) is package.KERNELS
    entries_of = {}
    for name, kind in package.KINDS.items():
        assert kind.NAME == name and all(hasattr(kind, a) for a in OWNS[method]), f"{method}.{name}"
        entries_of[name] = [v for v in vars(kind).values() if type(v).__name__ == "KernelSpec"]
    for spec in package.KERNELS:
        owner = spec.name.split(".", 1)[1]
        assert spec.name.startswith(f"{method}.") and any(spec is e for e in entries_of[owner]), spec.name


def test_every_kind_tile_is_the_one_tile():
    from radiance.kernels.nvidia.dense import skinny

    tiles = [paroquant.decode_tile(k, 1, 34816, 40, 132, (9, 0)) for k in ("mma_gl", "gemv_gl", "gemv", "deqt", "deq")]
    tiles += [paroquant.prefill_tile(k, (8, 6)) for k in ("wgmma", "deq", "fold")]
    tiles += [mxfp4.deqt.tile(3, 14336, 80, 132, (9, 0)), mxfp4.deq.tile(300, 14336, 80, 132, (9, 0))]
    tiles += [pq2.tile_for(path, 14336, 5120, m, 132, True, "sm_86") for path, m in
              (("dp4a", 1), ("gluon", 4), ("planes", 12), ("gluon_ws", 40), ("gluon_wgmma", 600), ("legacy", 3))]
    tiles += [skinny.TILE]
    assert all(type(t) is Tile for t in tiles)


def test_every_method_has_its_tuned_numbers_in_the_card_file():
    data = json.loads((tile.TILES / "sm_90.json").read_text())
    for method, package in PACKAGES.items():
        if method == "dense":  # cuBLAS' and the skinny GEMM's one tile: nothing tuned per card
            continue
        kinds = set(package.KINDS)
        assert data.get(method) and {e["kernel"] for e in data[method]} <= kinds, method
        assert tile.tuned("sm_90", method)


def test_a_cards_tuned_entry_sets_the_kinds_tile(tmp_path, monkeypatch):
    """fold's register cap is the H200's tuned number: a card file gives it, a card without one
    runs the heuristic's uncapped tile."""
    (tmp_path / "sm_90.json").write_text(json.dumps({"paroquant": [
        {"kernel": "fold", "rows": "prefill", "tile": {"bm": 128, "bn": 64, "stages": 2, "maxnreg": 200}}]}))
    monkeypatch.setattr(tile, "TILES", tmp_path)
    tile.tuned.cache_clear()
    try:
        assert paroquant.prefill_tile("fold", (9, 0)).maxnreg == 200
        assert paroquant.prefill_tile("fold", (8, 6)).maxnreg == 0
    finally:
        monkeypatch.undo()
        tile.tuned.cache_clear()
    assert paroquant.prefill_tile("fold", (9, 0)).maxnreg == 168  # the committed H200 file's


def test_every_methods_layers_share_one_scratch_pool():
    from radiance.kernels import gpu, mxfp4_ops, paro_ops, pq2_ops
    from radiance.testing import mxfp4_random as mr
    from radiance.testing import paro_random as rnd

    pool._POOL.clear()
    gen = torch.Generator().manual_seed(0)
    with gpu.virtual_gpu((9, 0), 132):  # CPU tensors standing for an H200: pq2 reserves its tickets too
        pq2_ops.prepare(torch.zeros(256, 64, dtype=torch.uint8), torch.ones(256, 2, dtype=torch.float16))
        first = pool.get("cpu")
        paro_ops.prepare(*rnd.merged([rnd.random_layer(256, 256, gen)]))
        mxfp4_ops.prepare(*mr.merged([mr.random_layer(256, 256, gen)]))
    assert list(pool._POOL) == [torch.device("cpu")]
    s = pool.get("cpu")
    assert s.part.numel() >= first.part.numel() and s.cnt.numel() >= pool.TICKETS and s.deq.numel() >= 256 * 256
