"""paroquant NVIDIA kernel plans on CPU with faked GPU capabilities: tile fitting, Turing choices,
disabled kernels and refusals, the partition guard, the weight repack and rotation tables."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from radiance.kernels import paro_ops as ops
from radiance.kernels.nvidia import paroquant as table
from radiance.kernels import registry
from radiance.kernels.config import KernelConfig
from radiance.kernels import reference
from radiance.kernels.formats.paroquant import unpack_awq
from radiance.kernels.triton import paro_gemm, paro_rotate, split_finish
from radiance.testing import paro_random as rnd
from radiance.kernels.linear import Run


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(3)


def kernel(m: int, cap=(9, 0), n: int = 34816, i8: bool = False, interpret: bool = False) -> str:
    """The kernel paro_table.KERNELS plans for M rows of an N x 5120 layer on that capability (under
    the knobs as set now)."""
    config = replace(KernelConfig.from_knobs(), interpret=interpret)
    return registry.choose(table.KERNELS, registry.Target.of("paroquant", "cuda", n, 5120, config, cap, i8)).spec(m).kernel


def test_turing_tiles_are_halved_to_fit_64kb():
    h200 = ops.prefill_tile("deq", (9, 0))
    turing = ops.prefill_tile("deq", (7, 5))
    assert ops.smem_bytes(h200, 2) > 64 * 1024  # the H200 tile would not fit a Turing SM
    assert ops.smem_bytes(turing, 2) <= 64 * 1024
    assert (turing.bm, turing.bn) != (h200.bm, h200.bn) or turing.stages < h200.stages
    assert h200 == ops.Tile(128, 256, 8, 3, 1, "deq")  # the H200 choice is unchanged by the fitting
    # the fused wgmma kind, 128-token tiles up to M = 128; its activation ring fits
    assert ops.prefill_tile("wgmma", (9, 0), 100) == ops.Tile(128, 128, 8, 3, 1, "wgmma")
    assert ops.prefill_tile("wgmma", (9, 0)) == ops.Tile(256, 128, 8, 3, 1, "wgmma")
    assert ops.smem_bytes(ops.prefill_tile("wgmma", (9, 0)), 2) <= ops.smem_limit((9, 0))
    # the W4A8 register cap was measured on sm_90 only (3 programs per SM there; sm_86 would spill)
    assert ops.prefill_tile("fold", (9, 0)) == ops.Tile(128, 64, 4, 2, 1, "fold", maxnreg=168)
    assert ops.prefill_tile("fold", (8, 6)) == ops.Tile(128, 64, 4, 2, 1, "fold")
    for m in (1, 16, 64):
        t = ops.decode_tile(kernel(m, (7, 5), 5120) if m <= 8 else "deqt", m, 5120, 136, 30, (7, 5))
        assert t.kind in ("gemv", "gemv_gl", "deqt")
        assert ops.smem_bytes(t, 2) <= 64 * 1024
    with pytest.raises(ValueError, match="'wgmma' is no decode-band kind"):
        ops.decode_tile("wgmma", 1, 5120, 40, 132, (9, 0))


def test_turing_decode_rows_stay_on_the_gemv_then_go_to_the_scratch(monkeypatch):
    # sm_75: Triton's dots have no tensor cores there, so the GEMV takes up to TURING_GEMV_MAX_M
    # rows (4 per program) and the scratch + cuBLAS path everything above
    assert ops.TURING_GEMV_MAX_M == 8
    for m, bm in ((1, 1), (2, 2), (3, 4), (8, 4)):
        assert kernel(m, (7, 5)) == "gemv_gl"
        t = ops.decode_tile("gemv_gl", m, 34816, 40, 30, (7, 5))
        assert t.bm == bm, (m, t)
        assert bm < 4 or t.bn == 64  # 2 columns per thread at 4 rows (register budget)
    assert kernel(9, (7, 5)) == kernel(2048, (7, 5)) == "scratch"
    assert kernel(3, (8, 6)) == kernel(9, (8, 6)) == "mma_gl"  # Ampere has the tensor cores
    assert kernel(17, (8, 6)) == "deqt"
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "paroquant.scratch")
    assert kernel(9, (7, 5)) == "deqt" and kernel(65, (7, 5)) == "deq"
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "paroquant.gemv_gl")  # the interpreter's kernel: one row per program
    assert kernel(5, (7, 5)) == "gemv"


@pytest.mark.parametrize("m, n, groups, want", [
    (1, 34816, 40, ops.Tile(8, 128, 4, 4, 2, "mma_gl")),  # gate_up: 272 column blocks x 2 splits, 4 warps
    (2, 34816, 40, ops.Tile(8, 128, 4, 4, 2, "mma_gl")),
    (8, 5120, 136, ops.Tile(8, 64, 2, 4, 8, "mma_gl")),  # down: 80 x 14 wanted, capped at 8
    (4, 14336, 40, ops.Tile(8, 64, 2, 4, 4, "mma_gl")),  # qkv: 224 x 5 wanted, a power of two below
    (1, 14336, 40, ops.Tile(8, 64, 2, 4, 4, "mma_gl")),  # M = 1 the same ring
    (1, 5120, 48, ops.Tile(8, 64, 4, 4, 8, "mma_gl")),  # out: 6 groups per program, one row tile per warp
    (8, 5120, 48, ops.Tile(8, 64, 4, 4, 8, "mma_gl")),
    # 16 tokens per program on a stream-K grid of 3 programs per SM: up to 3 programs share a tile
    (16, 34816, 40, ops.Tile(16, 128, 4, 3, 3, "mma_gl", persist=3)),
    (12, 14336, 40, ops.Tile(16, 64, 2, 3, 2, "mma_gl")),
    (16, 5120, 136, ops.Tile(16, 64, 2, 3, 8, "mma_gl")),  # down
    (17, 5120, 48, ops.Tile(32, 64, 4, 3, 8, "deqt")),  # above MMA_GL_MAX_M the Triton kind
])
def test_h200_decode_table(m, n, groups, want):
    # the H200 sweep's choices on the 27B shapes (132 SMs, sm_90)
    assert kernel(m, n=n) == want.kind
    assert ops.decode_tile(want.kind, m, n, groups, 132, (9, 0)) == want


def test_scratch_takes_over_above_the_band(gen):
    turing = ops.prepare(*rnd.merged([rnd.random_layer(128, 256, gen)]), cap=(7, 5))
    assert [ops.kind_for(turing, m) for m in (8, 9, 300)] == ["gemv_gl", "scratch", "scratch"]
    h200 = ops.prepare(*rnd.merged([rnd.random_layer(128, 256, gen)]), cap=(9, 0))
    assert ops.kind_for(h200, h200.decode_max_m) == "deqt" and ops.kind_for(h200, h200.decode_max_m + 1) == "scratch"


@pytest.mark.parametrize("cap, i8, n, interpret, disabled, want", [
    ((9, 0), False, 34816, False, "", "wgmma"),  # gate_up on the H200, up to WGMMA_MAX_M
    ((9, 0), False, 5120, False, "", "scratch"),  # down / out: too few programs, the scratch path wins
    ((9, 0), True, 34816, False, "", "fold"),  # W4A8 keeps its int8 GEMM
    ((8, 6), False, 34816, False, "", "scratch"),  # wgmma is sm_90's
    ((9, 0), False, 34816, True, "", "scratch"),  # the CPU interpreter runs no Gluon
    ((9, 0), False, 34816, False, "paroquant.wgmma", "scratch"),  # the scratch path for every prefill row
    ((9, 0), False, 5120, False, "paroquant.scratch", "wgmma"),  # the fused GEMM for every prefill row
    ((8, 6), False, 5120, False, "paroquant.scratch", "deq"),
])
def test_wgmma_prefill_band(monkeypatch, cap, i8, n, interpret, disabled, want):
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", disabled)
    assert kernel(100, cap, n, i8, interpret) == want
    wide = want == "wgmma" and not disabled
    assert kernel(ops.WGMMA_MAX_M + 1, cap, n, i8, interpret) == ("scratch" if wide else want)


def test_fit_tile_refuses_an_impossible_limit():
    with pytest.raises(ValueError, match="no GEMM tile fits"):
        ops.fit_tile(ops.Tile(128, 128, 8, 3, kind="deq"), 1024)


def test_bad_knob_values_are_errors(monkeypatch):
    monkeypatch.setenv("RADIANCE_PQ_SCRATCH_ROWS", "100")
    with pytest.raises(ValueError, match="RADIANCE_PQ_SCRATCH_ROWS=100: use 0"):
        KernelConfig.from_knobs()
    monkeypatch.setenv("RADIANCE_PQ_SCRATCH_ROWS", "0")
    monkeypatch.setenv("RADIANCE_PQ_I8", "2")
    with pytest.raises(ValueError, match="RADIANCE_PQ_I8"):
        KernelConfig.from_knobs()


def test_w4a8_below_ampere_is_refused_not_downgraded():
    assert ops.use_int8((8, 6), KernelConfig(i8=True)) is True
    with pytest.raises(ValueError, match="sm_80"):
        ops.use_int8((7, 5), KernelConfig(i8=True))


def test_decode_split_fills_the_gpu_and_respects_groups(monkeypatch):
    # gate_up: the measured wide-layer Gluon gemv tile, ~12 programs per SM by split-K
    assert ops.decode_tile("gemv_gl", 1, 34816, 40, 132, (9, 0)) == ops.Tile(1, 128, 4, 3, 6, "gemv_gl", 1)
    assert ops.decode_tile("gemv_gl", 2, 34816, 40, 132, (7, 5)) == ops.Tile(2, 128, 4, 2, 6, "gemv_gl", 1)
    assert kernel(9) == "mma_gl" and kernel(17) == "deqt"  # 16 tokens per program, then the Triton kind
    assert ops.decode_tile("deqt", 17, 34816, 40, 132, (9, 0)).split == 4  # 544 BM-32 tiles -> ~16 programs per SM
    assert ops.decode_tile("deqt", 64, 34816, 40, 132, (9, 0)).split == 2  # BM 64: ~8 per SM (the measured best)
    assert kernel(4, i8=True) == kernel(1, i8=True) == "deq"  # mma_gl, gemv and deqt are W4A16 only
    down = ops.decode_tile("gemv_gl", 1, 5120, 136, 132, (9, 0))
    assert down.split > 1 and down.bm == 1
    assert ops.decode_tile("mma_gl", 9, 5120, 136, 132, (9, 0)).bm == 16
    assert ops.decode_tile("gemv_gl", 1, 128, 2, 132, (9, 0)).split == 1  # never more splits than groups / 2
    assert ops.decode_tile("mma_gl", 1, 128, 2, 132, (9, 0)) == ops.Tile(8, 64, 2, 4, 1, "mma_gl")
    assert ops.decode_tile("deqt", 40, 5120, 40, 132, (9, 0)).bm == 64


def test_prepare_checks_partitions_and_boundaries(gen):
    parts = [rnd.random_layer(256, 256, gen), rnd.random_layer(128, 256, gen)]
    qw, qz, sc, rots, runs = rnd.merged(parts)
    with pytest.raises(ValueError, match="multiple of 128"):
        ops.prepare(qw, qz, sc, rots, [Run(0, 200, 0), Run(200, 384, 1)], cap=(9, 0))
    with pytest.raises(ValueError, match="one run each"):
        ops.prepare(qw, qz, sc, rots, cap=(9, 0))
    with pytest.raises(ValueError, match="must cover the 384 output columns"):
        ops.prepare(qw, qz, sc, rots, [Run(0, 256, 0), Run(256, 300, 1)], cap=(9, 0))
    with pytest.raises(ValueError, match="K=128"):
        ops.prepare(qw, qz, sc, [rots[0], rnd.rotation_of(rnd.random_layer(128, 128, gen))], runs, cap=(9, 0))
    layer = ops.prepare(qw, qz, sc, rots, runs, cap=(9, 0))
    assert layer.bounds == (256, 1 << 30) and layer.parts == 2
    ops.check_partitions(layer, torch.zeros(2, 3, 256, dtype=torch.float16))
    with pytest.raises(ValueError, match="do not match"):  # a 1-copy stack for a 2-rotation layer
        ops.check_partitions(layer, torch.zeros(1, 3, 256, dtype=torch.float16))


def test_merged_tile_never_straddles_a_boundary(gen):
    parts = [rnd.random_layer(384, 256, gen), rnd.random_layer(128, 256, gen)]
    layer = ops.prepare(*rnd.merged(parts), cap=(9, 0))
    for m, kind in ((1, None), (64, None), (100, "deq"), (100, "wgmma")):
        assert 384 % ops.tile_for(layer, m, kind).bn == 0


def test_repack_is_the_checkpoint_codes(gen):
    t = rnd.random_layer(64, 256, gen)
    wb, sc, d = paro_gemm.repack([t.qweight], [t.qzeros], [t.scales])
    codes = unpack_awq(t.qweight)  # [K, N]
    lo, hi = (wb & 15), (wb >> 4)  # [G, N, 64]
    assert torch.equal(lo[1, 5, 7], codes[128 + 7, 5]) and torch.equal(hi[1, 5, 7], codes[128 + 64 + 7, 5])
    assert torch.equal(d.to(torch.int16) + 8, unpack_awq(t.qzeros).to(torch.int16))
    assert torch.equal(sc, t.scales)


def test_rotation_tables_reproduce_reference_rotate(gen):
    t = rnd.random_layer(8, 384, gen, krot=5)
    tab = paro_rotate.build_tables([rnd.rotation_of(t)])
    x = torch.randn(4, 384, dtype=torch.float64, generator=gen)
    y = x * tab.cs[0].double()
    for layer in range(tab.krot):
        idx = (torch.arange(384) // 128) * 128 + tab.partner[0, layer].long()
        y = y * tab.cos[0, layer].double() + y[:, idx] * tab.ssin[0, layer].double()
    ref = reference.rotate(x, t.pairs, t.theta, t.channel_scales)
    assert rnd.rel(y, ref) < 1e-6  # the tables' cos/sin are fp32, the reference here float64


def test_empty_batch_and_wrong_width(gen):
    layer = ops.prepare(*rnd.merged([rnd.random_layer(128, 256, gen)]), cap=(9, 0))
    y = ops.forward(layer, torch.zeros(0, 256, dtype=torch.bfloat16))
    assert y.shape == (0, 128) and y.dtype == torch.bfloat16
    with pytest.raises(ValueError, match=r"expected input \[M, 256\]"):
        ops.forward(layer, torch.zeros(2, 384, dtype=torch.bfloat16))


def test_disabling_the_m1_kernels(monkeypatch):
    assert kernel(1) == kernel(1, (8, 6)) == "mma_gl" and kernel(1, (7, 5)) == "gemv_gl"  # no mma.sync on Turing
    assert kernel(1, interpret=True) == "gemv"  # the interpreter runs no Gluon
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "paroquant.mma_gl")
    assert kernel(1) == kernel(2) == "gemv_gl" and kernel(3) == "deqt"
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "paroquant.mma_gl,paroquant.gemv_gl")  # a benchmark's "before"
    assert kernel(1) == "gemv" and kernel(2) == "deqt"
    assert ops.decode_tile("gemv", 1, 34816, 40, 132, (9, 0)) == ops.Tile(1, 16, 2, 1, 1, "gemv", 4)
    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "paroquant.deq")
    with pytest.raises(NotImplementedError, match=r"paroquant on sm_90 at M=1\.\.64.*paroquant.deq: disabled"):
        kernel(1, i8=True)


@pytest.mark.parametrize("programs, tiles, groups", [(660, 272, 40), (396, 272, 40), (660, 80, 48), (5, 3, 7),
                                                     (1000, 2, 3), (132, 1, 136), (7, 7, 7)])
def test_stream_k_shares_and_partial_slots(programs, tiles, groups):
    """mma_gl's stream-K grid (paro_mma_gluon, STREAM): program p takes steps p W / P .. (p + 1) W / P of
    the W = tiles x groups (tile, group) steps; every step is taken exactly once, a tile's contributors
    are the programs the kernel computes from its first and last step, and their number never exceeds
    the partial slots stream_programs reserves (split)."""
    progs, slots = split_finish.stream_programs(programs, 1, tiles * 64, 8, 64, groups)
    work = tiles * groups
    assert progs == min(programs, work)
    owner = [None] * work
    for p in range(progs):
        for step in range(p * work // progs, (p + 1) * work // progs):
            assert owner[step] is None
            owner[step] = p
    assert None not in owner
    for t in range(tiles):
        holders = sorted(set(owner[t * groups:(t + 1) * groups]))
        first = ((t * groups + 1) * progs - 1) // work  # the kernel's formulas
        last = ((t + 1) * groups * progs - 1) // work
        assert holders == list(range(first, last + 1))
        assert len(holders) <= slots
    assert ops.stream_tile(ops.Tile(8, 64, 2, 4, 1, "mma_gl"), 1, tiles * 64, groups, 1, programs).split == slots
