"""pq2 kernel plans and tiles (pure Python) and the Triton kernels' integer logic in Triton's CPU
interpreter (TRITON_INTERPRET=1, in a subprocess so the real JIT elsewhere is untouched)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from radiance.kernels.nvidia import pq2 as table
from radiance.kernels.nvidia import tile as tiles
from radiance.kernels import registry
from radiance.kernels.config import KernelConfig


def kernel(m: int, cap=(9, 0), n: int = 5120, exact: bool = False, only: str | None = None) -> str:
    t = registry.Target.of("pq2", "cuda", n, 5120, KernelConfig.from_knobs(), cap, exact=exact)  # the knobs as set now
    return registry.choose(table.KERNELS, t, only).spec(m).kernel


@pytest.mark.parametrize("m,exact,path", [
    (1, False, "dp4a"), (2, False, "gluon"), (8, False, "gluon"), (9, False, "planes"), (16, False, "planes"),
    (1, True, "legacy"), (8, True, "planes"), (64, True, "planes"),
])
def test_plan_rows(m, exact, path):
    assert kernel(m, (8, 6), exact=exact) == path


def test_disabling_a_kernel_hands_its_rows_on(monkeypatch):
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "pq2.gluon")
    assert kernel(4) == "planes" and kernel(1) == "dp4a"
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "pq2.gluon, pq2.planes")
    assert kernel(4) == "legacy"
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "pq2.dp4a")
    assert kernel(1) == "legacy"
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "pq2.gluon_ring")
    with pytest.raises(ValueError, match="RADIANCE_DISABLED_KERNELS names pq2.gluon_ring, which no registry has"):
        kernel(1)
    # every kernel of the row range gone: the load fails naming each and why
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "pq2.dp4a")
    with pytest.raises(NotImplementedError, match=r"no kernel for pq2 on sm_75 at M=1.*pq2.dp4a: disabled"):
        kernel(1, (7, 5))


def test_forcing_one_kernel_plans_only_its_rows():
    assert kernel(300, only="pq2.legacy") == "legacy"
    plan = registry.choose(table.KERNELS, registry.Target("pq2", "cuda", 5120, 5120, (9, 0)), "pq2.gluon")
    assert plan.covers(2) and not plan.covers(1) and not plan.covers(9)
    with pytest.raises(NotImplementedError, match="pq2.gluon cannot run .* sm_75"):
        kernel(2, (7, 5), only="pq2.gluon")
    with pytest.raises(ValueError, match="no kernel 'pq2.fast'"):
        kernel(2, only="pq2.fast")


def test_gluon_tiles():
    assert table.tile_for("dp4a", 5120, 17408, 2, 132, True, "sm_90").mr == 2
    # the H200 entries and the heuristic elsewhere: 8 tokens per MMA, split-K on narrow layers
    # gate_up on a stream-K grid, lm_head the same tile on tiles x splits
    assert table.tile_for("gluon", 34816, 5120, 4, 132, True, "sm_90") == table.Tile(bn=128, bm=8, gpi=2, stages=1, persist=3)
    assert table.tile_for("gluon", 248320, 5120, 4, 132, True, "sm_90") == table.Tile(bn=128, bm=8, gpi=2, stages=1)
    assert table.tile_for("gluon", 5120, 17408, 4, 132, True, "sm_86").split == 8
    assert table.tile_for("gluon", 5120, 17408, 4, 132, False, "sm_86").split == 1


def test_wgmma_prefill_on_sm90_only():
    assert kernel(2048) == "gluon_wgmma" and kernel(2048, n=34816) == "gluon_wgmma"
    assert kernel(64) == "planes"
    # the warp-specialized kernel: M = 17..64 of the wide layers, M = 65..512 of the narrow ones
    assert kernel(17, n=34816) == "gluon_ws"
    assert kernel(64, n=table.WGMMA_MIN_N, exact=True) == "gluon_ws"  # bit-identical
    assert kernel(65, n=34816) == "gluon_wgmma"
    assert kernel(65, exact=True) == "gluon_ws"
    assert kernel(table.WS_MAX_M) == "gluon_ws" and kernel(table.WS_MAX_M + 1) == "gluon_wgmma"
    assert kernel(16, n=34816) == "planes"  # the small band is another kernel's
    assert kernel(17, (8, 6), n=34816) == "planes" and kernel(2048, (8, 6)) == "planes"
    assert kernel(2048, only="pq2.legacy") == "legacy"
    with pytest.raises(NotImplementedError, match="pq2.gluon_wgmma: needs sm_90"):
        kernel(2048, (8, 6), only="pq2.gluon_wgmma")
    assert table.tile_for("gluon_wgmma", 34816, 5120, 32, 132, True, "sm_90").bm == 32
    assert table.tile_for("gluon_wgmma", 34816, 5120, 33, 132, True, "sm_90").bm == 64
    assert table.tile_for("gluon_ws", 34816, 5120, 32, 132, True, "sm_90") == \
        table.Tile(bn=64, bm=32, warps=4, stages=4, maxnreg=80)
    assert table.tile_for("gluon_ws", 5120, 17408, 512, 132, True, "sm_90").bm == 64
    assert table.tile_for("gluon_ws", 5120, 6144, 512, 132, True, "sm_90").bn == 128  # out's own entry
    assert table.tile_for("gluon_ws", 5120, 6144, 512, 132, True, "sm_86").bn == 64  # the heuristic elsewhere
    assert table.tile_for("gluon_wgmma", 34816, 5120, 2048, 132, True, "sm_90") == \
        table.Tile(bn=128, bm=64, warps=4, stages=4)


def test_turing_runs_dp4a_everywhere():
    for m in (1, 4, 300):
        assert kernel(m, (7, 5)) == "dp4a"
    with pytest.raises(NotImplementedError, match="sm_80"):
        kernel(4, (7, 5), only="pq2.gluon")


def test_skinny_plan():
    from radiance.kernels.nvidia import dense as nv_dense
    from radiance.kernels.nvidia.dense import skinny

    def dense(m, n=96, cap=(8, 6)):
        return registry.choose(nv_dense.KERNELS, registry.Target("dense", "cuda", n, 5120, cap)).spec(m).kernel
    assert dense(4) == "skinny" and dense(17) == "cublas" and dense(4, 4096) == "cublas"
    # below sm_80 its dot has no tensor cores (the tile spills): cuBLAS
    assert dense(4, cap=(7, 5)) == "cublas"
    assert skinny.applies(4, 96, 5120) and not skinny.applies(17, 96, 5120)
    assert not skinny.applies(4, 4096, 5120)


def test_split_k_fills_small_grids_only():
    # few programs at M=4 on a narrow layer -> split; a wide layer needs none; exact never splits
    assert table.tile_for("planes", 5120, 17408, 4, 132, True).split > 1
    assert table.tile_for("planes", 248320, 5120, 4, 132, True).split == 1
    assert table.tile_for("planes", 5120, 17408, 4, 132, False).split == 1
    t = table.tile_for("planes", 5120, 17408, 4, 132, True)
    assert (17408 // 128) // t.split >= 4
    with pytest.raises(ValueError, match="multiple of the 128-group"):
        table.tile_for("planes", 96, 100, 1, 132, True)


def test_measured_table_wins(tmp_path, monkeypatch):
    t = table.Tile(bn=32, bm=16, split=8)
    table.write_tiles(tmp_path / "sm_test.json", {("planes", 5120, 6144, "small"): t})
    monkeypatch.setattr(tiles, "TILES", tmp_path)
    tiles.tuned.cache_clear()
    try:
        assert table.tile_for("planes", 5120, 6144, 4, 132, True, "sm_test") == t
        assert table.tile_for("planes", 5120, 6144, 4, 132, False, "sm_test").split == 1
        assert table.tile_for("planes", 5120, 6144, 17, 132, True, "sm_test") != t  # other tile class
        (tmp_path / "sm_bad.json").write_text('{"pq2": [{"kernel": "planes", "n": 1, "k": 128, "rows": "m1", '
                                               '"tile": {"bn": 8, "overlap": true}}]}')
        with pytest.raises(ValueError, match=r"sm_bad.json.*unknown fields \['overlap'\]"):
            table.tuned("sm_bad")
    finally:
        tiles.tuned.cache_clear()
    # the committed sm_90 file reads back as the tuner writes it (the other methods' entries kept)
    monkeypatch.undo()
    committed = tiles.TILES / "sm_90.json"
    (tmp_path / "sm_90.json").write_text(committed.read_text())
    table.write_tiles(tmp_path / "sm_90.json", table.tuned("sm_90"))
    assert (tmp_path / "sm_90.json").read_text() == committed.read_text()
    # the H200 entries: one per measured shape and class, splits only in tuned
    assert table.tile_for("planes", 5120, 17408, 4, 132, True, "sm_90").split == 8
    assert table.tile_for("dp4a", 34816, 5120, 1, 132, True, "sm_90") == table.Tile(bn=16, gpi=8, rr=2)
    assert table.tile_for("dp4a", 34816, 5120, 1, 132, True, "sm_86").rr == 2  # the heuristic: the H200's wide tile
    assert table.tile_for("dp4a", 34816, 5120, 3, 132, True, "sm_86") == table.Tile(bn=16, gpi=8, mr=4)  # token rows


INTERPRETED = textwrap.dedent("""
    import torch
    from radiance.kernels import pq2_ops, reference
    from radiance.kernels.formats.pq2 import Pq2Tensors, pack_ternary
    from radiance.kernels.nvidia import dense
    from radiance.kernels.nvidia.dense import skinny
    from radiance.kernels.nvidia.tile import Tile
    torch.manual_seed(0)
    for n, k, m, path, tile in [(40, 256, 3, "legacy", None), (40, 384, 1, "dp4a", None),
                                (40, 384, 1, "dp4a", Tile(bn=16, gpi=2, split=2)), (64, 1024, 1, "dp4a", Tile(bn=16, gpi=4)),
                                (64, 1024, 1, "dp4a", Tile(bn=32, gpi=2, split=2)), (64, 1024, 3, "dp4a", Tile(bn=16, gpi=4)),
                                (40, 384, 5, "dp4a", Tile(bn=16, gpi=2, split=2)), (64, 1024, 3, "dp4a", Tile(bn=16, gpi=4, mr=2)),
                                (40, 384, 7, "dp4a", Tile(bn=16, gpi=2, split=2, mr=4)), (64, 1024, 2, "dp4a", Tile(bn=32, gpi=4, mr=2)),
                                (70, 256, 5, "planes", None),
                                (70, 512, 17, "planes", Tile(bn=32, bm=16, split=3)),
                                # past one 128-row block of the prepared weights, the last one partial
                                (200, 1152, 3, "legacy", None), (200, 1152, 1, "dp4a", Tile(bn=64, gpi=2, split=2)),
                                (200, 1152, 5, "planes", Tile(bn=64, bm=16, split=2)),
                                # row sub-tiles sharing each activation load (with token rows, with split-K)
                                (64, 1024, 1, "dp4a", Tile(bn=32, gpi=4, rr=4)), (64, 1024, 3, "dp4a", Tile(bn=32, gpi=4, mr=2, rr=2)),
                                (200, 1152, 1, "dp4a", Tile(bn=64, gpi=2, rr=2, split=2))]:
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
        pq2_ops.forward(pq2_ops.prepare(qw, sc), torch.randn(1, k), path="dp4a", tile=Tile(bn=32, gpi=2, rr=3))
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
    from radiance.kernels import gpu
    with gpu.virtual_gpu((8, 6), 82):  # plan as on an sm_86 card: the skinny GEMM for these rows
        plan = dense.plan(w)
    assert plan.spec(5).kernel == "skinny"
    y2 = dense.linear(x[:, :256].repeat(1, 2), w, plan)
    y = skinny.linear(x[:, :256].repeat(1, 2), w, force=True)
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
