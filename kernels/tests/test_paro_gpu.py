"""paroquant Triton kernels on a CUDA GPU against reference.py (the numerics gate of issue 8).

Random layers (pairs a random permutation per group, random angles, zeros 2..14) at every
benchmark shape and odd M; W4A16 <= 2e-3 relative to the fp32 reference (bf16 in, bf16 out);
W4A8 <= 2e-3 relative to the reference with the same int8 per-group activation quantization;
the prologue's fp32 rotation <= 1e-5; a real layer quantized by radiance (carried as
.paro_real/qwen05b_layer0.safetensors, made by paro_random.export_real_layer) checked the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from radiance.testing.tools import require

pytestmark = pytest.mark.gpu

SHAPES = {  # name: partition sizes along N (merged linears have several), K
    "gate_up": ([34816], 5120), "down": ([5120], 17408), "qkv": ([14336], 5120), "out": ([5120], 6144),
    "qkv_P3": ([12288, 1024, 1024], 5120), "gate_up_P2": ([17408, 17408], 5120),
    "odd_n": ([1000], 1280),  # N a multiple of no tile, 10 groups
}
MS = (1, 2, 3, 13, 16, 33, 64, 65, 511, 2048)
REAL = Path(__file__).resolve().parents[2] / ".paro_real" / "qwen05b_layer0.safetensors"


@pytest.fixture(scope="module")
def gen():
    return torch.Generator(device="cuda").manual_seed(1234)


def _layers(sizes, k, gen):
    from radiance.testing import paro_random as rnd

    return [rnd.random_layer(n, k, gen) for n in sizes]


def _prepare(parts, i8: bool):
    from radiance.kernels import paro_ops as ops
    from radiance.testing import paro_random as rnd

    os.environ["RADIANCE_PQ_I8"] = "1" if i8 else "0"
    try:
        return ops.prepare(*rnd.merged(parts))
    finally:
        os.environ.pop("RADIANCE_PQ_I8", None)


@pytest.mark.parametrize("k", [5120, 17408, 6144])
def test_prologue_rotation_fp32(k, gen):
    from radiance.kernels import reference
    from radiance.testing import paro_random as rnd
    from radiance.kernels.triton import paro_rotate as pr

    (t,) = _layers([128], k, gen)
    tab = pr.build_tables([rnd.rotation_of(t)])
    for m, dense in ((1, None), (7, None), (7, True), (2048, False), (2048, None)):  # None: as dispatched
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        a, _, _ = pr.rotate(x, tab, pr.ROT32, dense=dense)
        err = rnd.rel(a[0], reference.rotate(x, t.pairs, t.theta, t.channel_scales))
        assert err <= 1e-5, f"K={k} M={m} dense={dense}: prologue rel {err:.2e}"


def test_prologue_int8_matches_quant_int8_group(gen):
    from radiance.kernels import reference
    from radiance.testing import paro_random as rnd
    from radiance.kernels.triton import paro_rotate as pr

    (t,) = _layers([128], 5120, gen)
    x = torch.randn(300, 5120, device="cuda", dtype=torch.bfloat16) * 3
    tab = pr.build_tables([rnd.rotation_of(t)])
    qr, sr = reference.quant_int8_group(reference.rotate(x, t.pairs, t.theta, t.channel_scales))
    # the rotation's rel. gate; codes may flip by one where a value sits near a rounding midpoint,
    # at a rate that grows with that gate (dense: 1.03e-4 of the codes on the H200, against the
    # reference quantizer made IEEE-exact on CUDA by reference.div_rn)
    for dense, tol, flip_rate in ((False, 1e-6, 1e-4), (True, 1e-5, 1e-3)):
        q, s, rs = pr.rotate(x, tab, pr.I8G, dense=dense)
        flips = (q[0].int() - qr.int()).abs()
        assert int(flips.max()) <= 1 and float(flips.gt(0).float().mean()) < flip_rate, f"dense={dense}"
        assert rnd.rel(s[0], sr) < tol, f"dense={dense}: scales rel {rnd.rel(s[0], sr):.2e}"
        assert torch.equal(rs[0], s[0] * q[0].float().view(300, -1, 128).sum(-1)), f"dense={dense}"  # S * sum, one rounding


def test_prologue_fragment_order_is_f16g_permuted(gen):
    """F16GF (mma_gl's input) is F16G with each group's channels at the fragment positions the
    mode documents: the same bits, scales and sums."""
    from radiance.testing import paro_random as rnd
    from radiance.kernels.triton import paro_rotate as pr

    ts = _layers([128, 128], 5120, gen)
    tab = pr.build_tables([rnd.rotation_of(t) for t in ts])
    ch = torch.arange(128)
    r = ch % 64
    pos = 32 * (r // 16) + 8 * ((r % 16) // 4) + 4 * (r % 2) + 2 * (ch // 64) + (r % 4) // 2
    assert sorted(pos.tolist()) == list(range(128))
    for m, dense in ((1, None), (5, None), (600, True)):
        x = torch.randn(m, 5120, device="cuda", dtype=torch.bfloat16)
        a, s, rs = pr.rotate(x, tab, pr.F16G, dense=dense)
        af, sf, rsf = pr.rotate(x, tab, pr.F16GF, dense=dense)
        grouped = af.view(2, m, 40, 128)[..., pos.to(af.device)].view(2, m, 5120)
        assert torch.equal(grouped, a) and torch.equal(sf, s) and torch.equal(rsf, rs), f"M={m} dense={dense}"


@pytest.mark.parametrize("i8", [False, True], ids=["W4A16", "W4A8"])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_gemm_every_shape_and_odd_m(shape, i8, gen):
    from radiance.kernels import paro_ops as ops
    from radiance.testing import paro_random as rnd

    sizes, k = SHAPES[shape]
    parts = _layers(sizes, k, gen)
    layer = _prepare(parts, i8)
    act = "int8_group" if i8 else None
    worst = []
    for m in MS:
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        y = ops.forward(layer, x)
        assert y.dtype == torch.bfloat16 and y.shape == (m, sum(sizes))
        err = rnd.rel(y, rnd.reference_merged(x, parts, act))
        worst.append((err, m))
    err, m = max(worst)
    assert err <= 2e-3, f"{shape} {'W4A8' if i8 else 'W4A16'}: worst rel {err:.2e} at M={m}: {worst}"


@pytest.mark.parametrize("i8", [False, True], ids=["W4A16", "W4A8"])
@pytest.mark.parametrize("shape", ["down", "qkv_P3", "odd_n"])
def test_every_kernel_kind(shape, i8, gen):
    """Each GEMM kind and tile the benchmark may pick, forced, on a split-K and a merged shape."""
    from radiance.kernels import paro_ops as ops
    from radiance.kernels.nvidia import pool
    from radiance.testing import paro_random as rnd

    sizes, k = SHAPES[shape]
    parts = _layers(sizes, k, gen)
    layer = _prepare(parts, i8)
    act = "int8_group" if i8 else None
    for m in (1, 3, 64, 300):
        x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        ref = rnd.reference_merged(x, parts, act)
        split = ops.tile_for(layer, m, "deqt" if m <= layer.decode_max_m else "deq").split
        tiles = [ops.Tile(16, 64, 4, 3, split, "fold"), ops.Tile(16, 128, 4, 3, split, "deq"),
                 ops.Tile(64, 128, 4, 4, split, "deq"), ops.Tile(128, 64, 4, 4, 1, "fold"),
                 ops.Tile(128, 64, 4, 2, 1, "fold"), ops.Tile(128, 64, 4, 2, 1, "fold", maxnreg=168)]
        if not i8:
            tiles += [ops.Tile(1, bn, w, 3, split, "gemv") for bn, w in ((64, 4), (128, 4), (256, 8))]
            tiles += [ops.Tile(bm, bn, w, st, sp, "deqt") for bm, bn, w, st, sp in
                      ((16, 64, 4, 4, split), (16, 128, 8, 3, split), (64, 128, 4, 4, split), (128, 128, 8, 3, 1),
                       (256, 128, 8, 3, 1))]
            tiles += [ops.Tile(1, bn, w, st, sp, "gemv_gl", gpi) for bn, w, st, sp, gpi in
                      ((16, 2, 1, 1, 1), (32, 2, 2, split, 1), (64, 2, 3, split, 2), (128, 4, 3, split, 2),
                       (16, 1, 2, 1, 1))]
            tiles += [ops.Tile(mr, bn, w, st, split, "gemv_gl") for mr, bn, w, st in
                      ((2, 32, 2, 2), (4, 64, 4, 2), (2, 64, 4, 3), (4, 32, 4, 3), (1, 64, 4, 5), (2, 64, 4, 4))]
            tiles += [ops.Tile(bt, bn, w, st, sp, "mma_gl") for bt, bn, w, st, sp in  # stages > 1: the cp.async ring
                      ((8, 64, 4, 1, split), (8, 128, 4, 1, split), (16, 64, 4, 1, split), (8, 64, 2, 1, 1),
                       (16, 128, 4, 1, 1), (8, 32, 2, 1, split), (8, 64, 4, 3, split), (8, 256, 4, 2, split),
                       (16, 128, 4, 4, 1), (8, 32, 2, 5, split), (8, 64, 2, 4, split), (8, 128, 4, 4, split), (8, 64, 2, 2, split))]
            tiles += [ops.Tile(16, 128, 4, st, split, "mma_gl", maxnreg=128) for st in (3, 4)]  # registers capped
            stream = [ops.stream_tile(ops.Tile(bt, 128, 4, st, 1, "mma_gl", maxnreg=cap), m, layer.n, k // 128, layer.sms, q)
                      for bt, st, cap, q in ((8, 4, 96, 5), (8, 4, 0, 1), (16, 3, 0, 3), (8, 1, 0, 2), (16, 2, 0, 7))]
            pool.reserve(x.device, max(t.split for t in stream) * m * layer.n)  # their partial slots
            tiles += stream  # stream-K grids
            if torch.cuda.get_device_capability()[0] == 9:  # wgmma (bm tokens x bn rows, no split-K)
                tiles += [ops.Tile(bm, bn, w, st, 1, "wgmma") for bm, bn, w, st in
                          ((64, 64, 4, 4), (128, 64, 4, 3), (128, 128, 8, 3), (256, 128, 8, 3), (128, 256, 8, 4))]
        for t in tiles:
            err = rnd.rel(ops.forward(layer, x, tile=t), ref)
            assert err <= 2e-3, f"{shape} M={m} {t}: rel {err:.2e}"


def test_decode_under_cuda_graph(gen):
    from radiance.kernels import paro_ops as ops

    parts = _layers([5120], 17408, gen)  # split-K: the ticket reduction inside the graph
    layer = _prepare(parts, False)
    x = torch.randn(1, 17408, device="cuda", dtype=torch.bfloat16)
    eager = ops.forward(layer, x)
    assert ops.tile_for(layer, 1).split > 1
    from radiance.testing.graphs import replayed

    assert torch.equal(replayed(lambda: ops.forward(layer, x)), eager)  # fixed split order: replays are bit-identical


def test_scratch_cublas_path(gen, monkeypatch):
    from radiance.kernels import paro_ops as ops
    from radiance.testing import paro_random as rnd

    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "paroquant.wgmma")
    parts = _layers([1024, 1024], 5120, gen)
    layer = _prepare(parts, False)
    assert ops.kind_for(layer, 300) == "scratch"
    x = torch.randn(300, 5120, device="cuda", dtype=torch.bfloat16)
    assert rnd.rel(ops.forward(layer, x), rnd.reference_merged(x, parts, None)) <= 2e-3


def test_wgmma_prefill_band_on_sm90(gen, monkeypatch):
    # sm_90 W4A16 rows above the decode band up to WGMMA_MAX_M of a wide layer run the fused wgmma
    # kind (both token tiles, a merged layer, a bias), the scratch path above; tolerance as for
    # every W4A16 path (2e-3 relative to the fp32 reference)
    from radiance.kernels import paro_ops as ops
    from radiance.testing import paro_random as rnd

    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("wgmma is sm_90's")
    monkeypatch.delenv("RADIANCE_DISABLED_KERNELS", raising=False)
    parts = _layers([8192, 1024], 1024, gen)
    layer = _prepare(parts, False)
    assert ops.kind_for(layer, ops.WGMMA_MAX_M) == "wgmma" and ops.kind_for(layer, ops.WGMMA_MAX_M + 1) == "scratch"
    bias = torch.randn(9216, device="cuda", dtype=torch.bfloat16)
    for m in (65, 128, 129, 256, 257):  # 257: the scratch path
        if m <= ops.WGMMA_MAX_M:
            assert ops.tile_for(layer, m).kind == "wgmma"
        x = torch.randn(m, 1024, device="cuda", dtype=torch.bfloat16)
        ref = rnd.reference_merged(x, parts, None)
        assert rnd.rel(ops.forward(layer, x), ref) <= 2e-3, f"M={m}"
        assert rnd.rel(ops.forward(layer, x, bias=bias), ref + bias.float()) <= 2e-3, f"M={m} bias"


def test_scratch_pieces_on_a_side_stream_and_in_a_cuda_graph(gen, monkeypatch):
    # RADIANCE_PQ_SCRATCH_ROWS: the weight dequantized in pieces on a side stream, two buffers
    # reused (five pieces here); eager and graph-replayed against the fp32 reference (2e-3), and the
    # replay equal to eager (the same kernels in the same order)
    from radiance.kernels import paro_ops as ops
    from radiance.testing import paro_random as rnd

    monkeypatch.setenv("RADIANCE_DISABLED_KERNELS", "paroquant.wgmma")
    monkeypatch.setenv("RADIANCE_PQ_SCRATCH_ROWS", "512")
    parts = _layers([1024, 1536], 2048, gen)
    layer = _prepare(parts, False)
    assert layer.scratch_rows == 512
    bias = torch.randn(2560, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(300, 2048, device="cuda", dtype=torch.bfloat16)
    ref = rnd.reference_merged(x, parts, None) + bias.float()
    eager = ops.forward(layer, x, bias=bias)
    assert rnd.rel(eager, ref) <= 2e-3
    from radiance.testing.graphs import replayed

    assert torch.equal(replayed(lambda: ops.forward(layer, x, bias=bias)), eager)


def test_cast_rounds_like_torch():
    from radiance.kernels.triton import paro_scratch

    x = (torch.randn(3, 100_003, device="cuda") * 1000).half()
    assert torch.equal(paro_scratch.cast(x, torch.bfloat16), x.to(torch.bfloat16))  # round to nearest even


def test_turing_dispatch_on_this_gpu(gen):
    """The sm_75 choices (GEMV up to TURING_GEMV_MAX_M rows, 4 per program; scratch + cuBLAS
    above; tiles fitted to 64 KB) forced here, for their numerics."""
    from radiance.kernels import paro_ops as ops
    from radiance.testing import paro_random as rnd

    parts = _layers([1024, 1024], 5120, gen)
    layer = ops.prepare(*rnd.merged(parts), cap=(7, 5))
    for m in (1, 3, 8, 9, 100):
        x = torch.randn(m, 5120, device="cuda", dtype=torch.bfloat16)
        err = rnd.rel(ops.forward(layer, x), rnd.reference_merged(x, parts, None))
        assert err <= 2e-3, f"sm_75 dispatch M={m}: rel {err:.2e}"


def test_rtx3090_dispatch_on_this_gpu(gen):
    """The sm_86 choices (tiles fitted to 99 KB, no wgmma: the scratch path above the decode band;
    the tensor-core prologue's mma.sync tile, paro_rotate.dense_tile) forced here, for their numerics."""
    from radiance.kernels import paro_ops as ops
    from radiance.kernels import reference
    from radiance.testing import paro_random as rnd
    from radiance.kernels.triton import paro_rotate as pr

    parts = _layers([1024, 1024], 5120, gen)
    for i8, act in ((False, None), (True, "int8_group")):
        os.environ["RADIANCE_PQ_I8"] = "1" if i8 else "0"
        try:
            layer = ops.prepare(*rnd.merged(parts), cap=(8, 6))
        finally:
            os.environ.pop("RADIANCE_PQ_I8", None)
        for m in (1, 3, 8, 9, 16, 17, 100, 600):
            x = torch.randn(m, 5120, device="cuda", dtype=torch.bfloat16)
            err = rnd.rel(ops.forward(layer, x), rnd.reference_merged(x, parts, act))
            assert err <= 2e-3, f"sm_86 dispatch {act or 'W4A16'} M={m}: rel {err:.2e}"
    tab = pr.build_tables([rnd.rotation_of(parts[0])])
    x = torch.randn(600, 5120, device="cuda", dtype=torch.bfloat16)
    want = reference.rotate(x, parts[0].pairs, parts[0].theta, parts[0].channel_scales)
    bm, warps = pr.dense_tile(pr.ROT32, (8, 6))
    a, _, _ = pr.rotate(x, tab, pr.ROT32, bm=bm, warps=warps, dense=True)
    assert rnd.rel(a[0], want) <= 1e-5, f"sm_86 dense prologue tile {bm} x {warps} warps"


@pytest.mark.parametrize("i8", [False, True], ids=["W4A16", "W4A8"])
def test_real_qwen_layer(i8):
    require(REAL.is_file(), f"{REAL} missing: make it with paro_random.export_real_layer and carry .paro_real")
    from safetensors.torch import load_file

    from radiance.kernels import paro_ops as ops
    from radiance.testing import paro_random as rnd

    st = {k: v.cuda() for k, v in load_file(str(REAL)).items()}
    sites = {"qkv": (["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"], "x.attn"),
             "o": (["self_attn.o_proj"], "x.attn"), "gate_up": (["mlp.gate_proj", "mlp.up_proj"], "x.mlp"),
             "down": (["mlp.down_proj"], "x.down")}
    act = "int8_group" if i8 else None
    for site, (names, xname) in sites.items():
        parts = [rnd.ParoTensors.from_state(st, n) for n in names]
        layer = _prepare(parts, i8)
        for m in (1, 5, 64, 300):
            x = st[xname][:m]
            err = rnd.rel(ops.forward(layer, x), rnd.reference_merged(x, parts, act))
            assert err <= 2e-3, f"real {site} M={m}: rel {err:.2e}"


def test_ops_plan_with_bias(gen):
    from radiance.kernels import ops
    from radiance.testing import paro_random as rnd

    parts = _layers([1024, 256, 256], 2048, gen)
    prep = ops.prepare_parts("paroquant", parts)
    bias = torch.randn(1536, device="cuda", dtype=torch.bfloat16)
    for m in (1, 4, 100):  # mma_gl (M = 1, 4), the scratch path: each adds the bias before its one rounding
        x = torch.randn(m, 2048, device="cuda", dtype=torch.bfloat16)
        y = ops.linear_forward(prep, x, bias)
        ref = rnd.reference_merged(x, parts, None) + bias.float()
        assert rnd.rel(y, ref) <= 2e-3


def test_dependent_launch_bit_identical_back_to_back(gen):
    # kernels/pdl.py: on sm_90 8-token mma_gl tiles with split <= PDL_MAX_SPLIT launch while the prologue
    # runs and wait for it in the kernel. Eight calls on eight inputs in one CUDA graph (each
    # prologue's output lands where the last one was freed: a GEMM that did not wait would read the
    # previous call's), against the same layer with the dependent launch off, bit for bit
    from dataclasses import replace

    from radiance.kernels import paro_ops as ops
    from radiance.testing.graphs import assert_back_to_back

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs sm_90+")
    for sizes, k in (SHAPES["qkv_P3"], SHAPES["odd_n"]):
        layer = _prepare(_layers(sizes, k, gen), False)
        off = replace(layer, pdl=False, tiles={})
        assert layer.pdl
        for m in (1, 2, 8):
            assert ops.launches_dependent(ops.tile_for(layer, m)), f"{sizes} M={m}"
            xs = [torch.randn(m, k, device="cuda", dtype=torch.bfloat16) for _ in range(8)]
            want = [ops.forward(off, x) for x in xs]
            assert_back_to_back([lambda x=x: ops.forward(layer, x) for x in xs], want, f"{sizes} M={m}")
