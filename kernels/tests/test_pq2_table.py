"""pq2 dispatch logic (pure Python) and the Triton kernels' integer logic in Triton's CPU
interpreter (TRITON_INTERPRET=1, in a subprocess so the real JIT elsewhere is untouched)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from radiance.kernels import pq2_table as table


def test_bands():
    assert [table.band(m) for m in (1, 2, 16, 17, 2048)] == ["m1", "small", "small", "prefill", "prefill"]
    with pytest.raises(ValueError):
        table.band(0)


@pytest.mark.parametrize("kset,m,path,split", [
    ("tuned", 1, "dp4a", True), ("tuned", 2, "gluon", True), ("tuned", 8, "gluon", True), ("tuned", 9, "planes", True),
    ("tuned", 16, "planes", True), ("tuned", 512, "planes", True),
    ("exact", 1, "legacy", False), ("exact", 8, "planes", False), ("exact", 2048, "planes", False),
    ("legacy", 1, "legacy", False), ("legacy", 16, "legacy", False), ("legacy", 17, "legacy", False),
])
def test_set_paths(kset, m, path, split):
    assert table.select_path(kset, m, {}) == (path, split)


def test_switch_overrides_its_band_only():
    env = {"RADIANCE_PQ2_SMALL": "legacy"}
    assert table.select_path("tuned", 4, env)[0] == "legacy"
    assert table.select_path("tuned", 1, env)[0] == "dp4a"
    assert table.select_path("legacy", 1, {"RADIANCE_PQ2_M1": "dp4a"})[0] == "dp4a"


def test_gluon_band_is_the_tuned_sets_only():
    assert table.select_path("tuned", 2, {}, (8, 6))[0] == "gluon"  # mma.sync: Ampere and later
    assert table.select_path("exact", 2, {}, (9, 0))[0] == "planes"  # another summation order
    assert table.select_path("tuned", 2, {"RADIANCE_PQ2_SMALL": "planes"}, (9, 0))[0] == "planes"
    assert table.select_path("tuned", 2, {"RADIANCE_PQ2_SMALL": "dp4a"}, (9, 0))[0] == "dp4a"
    assert table.select_path("tuned", 2, {}, (7, 5))[0] == "dp4a"  # Turing: no int8 MMA in Triton
    assert table.tile_for("dp4a", 5120, 17408, 2, 132, True, "sm_90").mr == 2
    # the H200 entries and the heuristic elsewhere: 8 tokens per MMA, split-K on narrow layers
    # gate_up on a stream-K grid, lm_head the same tile on tiles x splits
    assert table.tile_for("gluon", 34816, 5120, 4, 132, True, "sm_90") == table.Tile(bn=128, bt=8, bc=2, stages=1, persist=3)
    assert table.tile_for("gluon", 248320, 5120, 4, 132, True, "sm_90") == table.Tile(bn=128, bt=8, bc=2, stages=1)
    assert table.tile_for("gluon", 5120, 17408, 4, 132, True, "sm_86").splits == 8
    assert table.tile_for("gluon", 5120, 17408, 4, 132, False, "sm_86").splits == 1


def test_wgmma_prefill_on_sm90_only():
    assert table.select_path("tuned", 2048, {}, (9, 0)) == ("gluon_wgmma", True)
    assert table.select_path("tuned", 2048, {}, (9, 0), n=34816) == ("gluon_wgmma", True)
    assert table.select_path("tuned", 64, {}, (9, 0))[0] == "planes"
    # the warp-specialized kernel: M = 17..64 of the wide layers, M = 65..512 of the narrow ones
    assert table.select_path("tuned", 17, {}, (9, 0), n=34816)[0] == "gluon_ws"
    assert table.select_path("exact", 64, {}, (9, 0), n=table.WGMMA_MIN_N) == ("gluon_ws", False)  # bit-identical
    assert table.select_path("tuned", 65, {}, (9, 0), n=34816)[0] == "gluon_wgmma"
    assert table.select_path("exact", 65, {}, (9, 0), n=5120) == ("gluon_ws", False)
    assert table.select_path("tuned", table.WS_MAX_M, {}, (9, 0), n=5120)[0] == "gluon_ws"
    assert table.select_path("tuned", table.WS_MAX_M + 1, {}, (9, 0), n=5120)[0] == "gluon_wgmma"
    assert table.select_path("tuned", 64, {}, (9, 0), n=5120)[0] == "planes"
    assert table.select_path("tuned", 16, {}, (9, 0), n=34816)[0] == "planes"  # the small band is another table
    assert table.select_path("tuned", 17, {}, (8, 6), n=34816)[0] == "planes"
    assert table.tile_for("gluon_wgmma", 34816, 5120, 32, 132, True, "sm_90").bt == 32
    assert table.tile_for("gluon_wgmma", 34816, 5120, 33, 132, True, "sm_90").bt == 64
    assert table.tile_for("gluon_ws", 34816, 5120, 32, 132, True, "sm_90") == \
        table.Tile(bn=64, bt=32, warps=4, stages=4, maxnreg=80, overlap=False)
    assert table.tile_for("gluon_ws", 5120, 17408, 512, 132, True, "sm_90").bt == 64
    assert table.tile_for("gluon_ws", 5120, 6144, 512, 132, True, "sm_90").bn == 128  # out's own entry
    assert table.tile_for("gluon_ws", 5120, 6144, 512, 132, True, "sm_86").bn == 64  # the heuristic elsewhere
    assert table.select_path("legacy", 2048, {}, (9, 0))[0] == "legacy"
    assert table.select_path("tuned", 2048, {}, (8, 6))[0] == "planes"
    assert table.select_path("tuned", 2048, {"RADIANCE_PQ2_PREFILL": "gluon_ring"}, (8, 6))[0] == "gluon_ring"
    for path in table.WGMMA_PATHS:
        with pytest.raises(table.Pq2ConfigError, match=f"RADIANCE_PQ2_PREFILL={path}: wgmma is sm_90 only"):
            table.select_path("tuned", 2048, {"RADIANCE_PQ2_PREFILL": path}, (8, 6))
    assert table.tile_for("gluon_wgmma", 34816, 5120, 2048, 132, True, "sm_90") == \
        table.Tile(bn=128, bt=64, warps=4, stages=4, overlap=False)


def test_turing_runs_dp4a_everywhere():
    for kset in table.SETS:
        for m in (1, 4, 300):
            assert table.select_path(kset, m, {}, (7, 5))[0] == "dp4a"
    with pytest.raises(table.Pq2ConfigError, match="sm_80"):
        table.select_path("tuned", 4, {"RADIANCE_PQ2_SMALL": "gluon"}, (7, 5))


def test_bad_values_name_the_knob():
    with pytest.raises(table.Pq2ConfigError, match="RADIANCE_PQ2_KERNELS='fast'"):
        table.select_path("fast", 1, {})
    with pytest.raises(table.Pq2ConfigError, match="RADIANCE_PQ2_PREFILL='gluon'"):
        table.select_path("tuned", 100, {"RADIANCE_PQ2_PREFILL": "gluon"})
    with pytest.raises(table.Pq2ConfigError, match="RADIANCE_SKINNY_GEMM"):
        table.skinny_enabled("tuned", {"RADIANCE_SKINNY_GEMM": "yes"})


def test_skinny_switch():
    assert table.skinny_enabled("tuned", {}) and not table.skinny_enabled("exact", {})
    assert table.skinny_enabled("legacy", {"RADIANCE_SKINNY_GEMM": "1"})
    assert table.skinny_applies(4, 96, 5120) and not table.skinny_applies(17, 96, 5120)
    # below sm_80 its dot has no tensor cores (the tile spills): cuBLAS by default, the switch refused
    assert not table.skinny_enabled("tuned", {}, (7, 5)) and table.skinny_enabled("tuned", {}, (8, 6))
    with pytest.raises(table.Pq2ConfigError, match=r"RADIANCE_SKINNY_GEMM=1 needs .*sm_75"):
        table.skinny_enabled("tuned", {"RADIANCE_SKINNY_GEMM": "1"}, (7, 5))
    assert not table.skinny_applies(4, 4096, 5120)


def test_split_k_fills_small_grids_only():
    # few programs at M=4 on a narrow layer -> split; a wide layer needs none; exact never splits
    assert table.tile_for("planes", 5120, 17408, 4, 132, True).splits > 1
    assert table.tile_for("planes", 248320, 5120, 4, 132, True).splits == 1
    assert table.tile_for("planes", 5120, 17408, 4, 132, False).splits == 1
    t = table.tile_for("planes", 5120, 17408, 4, 132, True)
    assert (17408 // 128) // t.splits >= 4
    with pytest.raises(ValueError, match="multiple of the 128-group"):
        table.tile_for("planes", 96, 100, 1, 132, True)


def test_measured_table_wins():
    t = table.Tile(bn=32, bt=16, splits=8)
    table.TUNED[("sm_test", "planes", 5120, 6144, "small")] = t
    try:
        assert table.tile_for("planes", 5120, 6144, 4, 132, True, "sm_test") == t
        assert table.tile_for("planes", 5120, 6144, 4, 132, False, "sm_test").splits == 1
        assert table.tile_for("planes", 5120, 6144, 17, 132, True, "sm_test") != t  # other tile class
    finally:
        del table.TUNED[("sm_test", "planes", 5120, 6144, "small")]
    # the H200 entries: one per measured shape and class, splits only in tuned
    assert table.tile_for("planes", 5120, 17408, 4, 132, True, "sm_90").splits == 8
    assert table.tile_for("dp4a", 34816, 5120, 1, 132, True, "sm_90") == table.Tile(bn=16, bc=8, rr=2)
    assert table.tile_for("dp4a", 34816, 5120, 1, 132, True, "sm_86").rr == 2  # the heuristic: the H200's wide tile
    assert table.tile_for("dp4a", 34816, 5120, 3, 132, True, "sm_86") == table.Tile(bn=16, bc=8, mr=4)  # token rows


INTERPRETED = textwrap.dedent("""
    import torch
    from radiance.kernels import pq2_ops, reference
    from radiance.kernels.formats.pq2 import Pq2Tensors, pack_ternary
    from radiance.kernels.pq2_table import Tile
    torch.manual_seed(0)
    for n, k, m, path, tile in [(40, 256, 3, "legacy", None), (40, 384, 1, "dp4a", None),
                                (40, 384, 1, "dp4a", Tile(bn=16, bc=2, splits=2)), (64, 1024, 1, "dp4a", Tile(bn=16, bc=4)),
                                (64, 1024, 1, "dp4a", Tile(bn=32, bc=2, splits=2)), (64, 1024, 3, "dp4a", Tile(bn=16, bc=4)),
                                (40, 384, 5, "dp4a", Tile(bn=16, bc=2, splits=2)), (64, 1024, 3, "dp4a", Tile(bn=16, bc=4, mr=2)),
                                (40, 384, 7, "dp4a", Tile(bn=16, bc=2, splits=2, mr=4)), (64, 1024, 2, "dp4a", Tile(bn=32, bc=4, mr=2)),
                                (70, 256, 5, "planes", None),
                                (70, 512, 17, "planes", Tile(bn=32, bt=16, splits=3)),
                                # past one 128-row block of the prepared weights, the last one partial
                                (200, 1152, 3, "legacy", None), (200, 1152, 1, "dp4a", Tile(bn=64, bc=2, splits=2)),
                                (200, 1152, 5, "planes", Tile(bn=64, bt=16, splits=2)),
                                # row sub-tiles sharing each activation load (with token rows, with split-K)
                                (64, 1024, 1, "dp4a", Tile(bn=32, bc=4, rr=4)), (64, 1024, 3, "dp4a", Tile(bn=32, bc=4, mr=2, rr=2)),
                                (200, 1152, 1, "dp4a", Tile(bn=64, bc=2, rr=2, splits=2))]:
        codes = torch.randint(0, 3, (n, k), dtype=torch.uint8)
        qw = pack_ternary(codes)
        x = torch.randint(-127, 128, (m, k)).float()
        x.view(m, -1, 128)[:, :, 0] = 127.0  # activation scale 1: the output is the integer matmul
        y = pq2_ops.forward(pq2_ops.prepare(qw, torch.ones(n, k // 128).half()), x, path=path, tile=tile)
        assert torch.equal(y, (x.double() @ (codes.double() - 1).t()).float()), (path, n, k, m)
        sc = (torch.rand(n, k // 128) * 0.02 + 1e-3).half()
        xb = torch.randn(m, k)
        y = pq2_ops.forward(pq2_ops.prepare(qw, sc), xb, path=path, tile=tile)
        ref = reference.pq2_linear(xb, Pq2Tensors(qw, sc))
        assert ((y - ref).norm() / ref.norm()).item() < 1e-5, (path, n, k, m)
    try:  # 32 rows do not split into three sub-tiles
        pq2_ops.forward(pq2_ops.prepare(qw, sc), torch.randn(1, k), path="dp4a", tile=Tile(bn=32, bc=2, rr=3))
        raise AssertionError("rr=3 must be refused")
    except ValueError as e:
        assert "rr" in str(e)
    x = torch.randn(5, 384) * 4
    x[1, :128] = 0
    rq, ra = reference.quant_int8_group(x)
    for planes in (False, True):
        q, a, t = pq2_ops.quantize_activations(x, planes=planes)
        want = rq.view(5, -1, 32, 4).transpose(2, 3).reshape(5, 384) if planes else rq
        assert torch.equal(q, want) and torch.equal(a, ra)
        assert torch.equal(t, rq.view(5, -1, 128).int().sum(-1))
    w = torch.randn(40, 512)
    import os
    os.environ["RADIANCE_SKINNY_GEMM"] = "1"
    y2 = pq2_ops.dense_linear(x[:, :256].repeat(1, 2), w)
    os.environ["RADIANCE_SKINNY_GEMM"] = "0"
    assert torch.equal(pq2_ops.dense_linear(x[:, :256].repeat(1, 2), w), x[:, :256].repeat(1, 2) @ w.t())
    y = pq2_ops.skinny_linear(x[:, :256].repeat(1, 2), w, force=True)
    assert torch.equal(y, y2)
    ref = x[:, :256].repeat(1, 2).double() @ w.double().t()
    assert ((y.double() - ref).norm() / ref.norm()).item() < 1e-5
    print("ok")
""")


def test_kernels_in_triton_interpreter():
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    r = subprocess.run([sys.executable, "-c", INTERPRETED], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
