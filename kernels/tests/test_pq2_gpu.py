"""pq2 Triton kernels against kernels/reference.py, on a CUDA GPU (run on the device).

Fresh random weights and activations each run; outputs poisoned (NaN) before each run and
checked fully written; integer parts checked exactly (integer activations with group amax 127,
unit scales, fp32 output: every path must return the exact integer matmul); the exact kernels
bit-identical to `legacy`; the launch plan's direct path bit-identical to Triton's launcher.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu

BENCH_SHAPES = [(34816, 5120), (5120, 17408), (14336, 5120), (5120, 6144), (248320, 5120)]
ODD_SHAPES = [(1000, 384), (96, 5120), (4100, 1152)]  # N not a multiple of any tile
MS = [1, 3, 7, 16, 17, 100, 2048]


def _cuda():
    # conftest skips `gpu` tests where CUDA is absent
    return torch.device("cuda")


def _layer(n, k, dev, unit_scales=False):
    from radiance.kernels import pq2_ops
    from radiance.kernels.formats.pq2 import Pq2Tensors, pack_ternary

    codes = torch.randint(0, 3, (n, k), dtype=torch.uint8, device=dev)
    qw = pack_ternary(codes)
    if unit_scales:
        sc = torch.ones(n, k // 128, dtype=torch.float16, device=dev)
    else:
        sc = (torch.rand(n, k // 128, device=dev) * 0.02 + 1e-3).half()
    return pq2_ops.prepare(qw, sc), Pq2Tensors(qw, sc), codes


def _ms_for(n):
    return MS


def _paths(m):
    from radiance.kernels.nvidia.pq2 import tile_class

    # dp4a at M > 1: the sm_75 path (up to 4 token rows per program)
    return {"m1": ["legacy", "dp4a"], "small": ["legacy", "planes", "gluon", "dp4a"],
            "mid": ["legacy", "planes"] + _wgmma(), "large": ["legacy", "planes"] + _wgmma()}[tile_class(m)]


def _wgmma():
    return ["gluon_wgmma", "gluon_ws"] if torch.cuda.get_device_capability()[0] == 9 else []


def _run(layer, x, **kw):
    from radiance.kernels import pq2_ops

    out = torch.full((x.shape[0], layer.n), float("nan"), dtype=x.dtype, device=x.device)
    y = pq2_ops.forward(layer, x, out=out, **kw)
    assert y.data_ptr() == out.data_ptr()
    assert not torch.isnan(y).any(), "output not fully written"
    return y


@pytest.mark.parametrize("n,k", BENCH_SHAPES + ODD_SHAPES)
def test_paths_match_reference(n, k):
    from radiance.kernels import reference

    dev = _cuda()
    layer, tens, _ = _layer(n, k, dev)
    for m in _ms_for(n):
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        ref = reference.pq2_linear(x.float(), tens)
        for path in _paths(m):
            y = _run(layer, x, path=path)
            err = ((y.float() - ref).norm() / ref.norm()).item()
            assert err <= 2e-3, f"{path} N={n} K={k} M={m}: rel err {err:.2e}"


@pytest.mark.parametrize("n,k", [(5120, 17408), (14336, 5120), (4100, 1152)])
def test_integer_parts_exact(n, k):
    from radiance.kernels import pq2_ops, reference

    dev = _cuda()
    layer, _, codes = _layer(n, k, dev, unit_scales=True)
    w = codes.to(torch.float64) - 1
    for m in [1, 3, 16, 17, 100]:
        x = torch.randint(-127, 128, (m, k), device=dev).float()
        x.view(m, -1, 128)[:, :, 0] = 127.0  # group amax 127 -> activation scale exactly 1
        q, a = reference.quant_int8_group(x)
        assert torch.equal(q.float(), x) and bool((a == 1).all())
        exact = (x.double() @ w.t()).float()
        for path in _paths(m):
            y = _run(layer, x, path=path)
            assert torch.equal(y, exact), f"{path} M={m}: integer accumulators differ from the reference"
        for planes in (False, True):
            pq, pa, pt = pq2_ops.quantize_activations(x.bfloat16(), planes=planes)
            rq, ra = (v.to(dev) for v in reference.quant_int8_group(x.bfloat16().cpu()))
            if planes:  # position 32*s + b holds element 4*b + s of each group
                rq = rq.view(m, -1, 32, 4).transpose(2, 3).reshape(m, k)
            assert torch.equal(pq, rq) and torch.equal(pa, ra)
            assert torch.equal(pt, rq.view(m, -1, 128).int().sum(-1))


@pytest.mark.parametrize("n,k", [(5120, 6144), (4100, 1152)])  # EVEN tiles and ragged ones
def test_every_candidate_tile_exact(n, k):
    from radiance.kernels.nvidia.pq2.candidates import CANDIDATES

    layer, _, codes = _layer(n, k, _cuda(), unit_scales=True)
    cases = [(1, "dp4a", CANDIDATES["dp4a"]), (3, "dp4a", CANDIDATES["dp4a_rows"]), (8, "dp4a", CANDIDATES["dp4a_rows"]),
             (3, "planes", CANDIDATES["small"]), (16, "planes", CANDIDATES["small"]),
             (3, "gluon", CANDIDATES["gluon"]), (16, "gluon", CANDIDATES["gluon"]), (9, "gluon", CANDIDATES["gluon"]),
             (40, "planes", CANDIDATES["mid"]), (300, "planes", CANDIDATES["prefill"])]
    _exact_tiles(layer, codes, k, cases)


@pytest.mark.parametrize("n,k", [(5120, 6144), (4100, 1152)])
def test_prefill_gluon_tiles_exact(n, k):
    # the Gluon prefill kernels' candidates (integer-exact) at a ragged and a 5-wave M
    from radiance.kernels.nvidia.pq2.candidates import CANDIDATES

    if not _wgmma():
        pytest.skip("the Gluon prefill kernels are sm_90's")
    layer, _, codes = _layer(n, k, _cuda(), unit_scales=True)
    _exact_tiles(layer, codes, k, [(m, p, CANDIDATES[p]) for m in (17, 300) for p in _wgmma()])


def _exact_tiles(layer, codes, k, cases):
    w = codes.to(torch.float64) - 1
    dev = codes.device
    for m, path, tiles in cases:
        x = torch.randint(-127, 128, (m, k), device=dev).float()
        x.view(m, -1, 128)[:, :, 0] = 127.0
        exact = (x.double() @ w.t()).float()
        for tile in tiles:
            y = _run(layer, x, path=path, tile=tile)
            assert torch.equal(y, exact), f"{path} {tile} N={layer.n} K={k} M={m}"


def test_quant_matches_reference_bitwise():
    from radiance.kernels import pq2_ops, reference

    dev = _cuda()
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        x = torch.randn(37, 5120, device=dev, dtype=dtype) * 3
        x[0, :128] = 0  # an all-zero group: scale 0, codes 0
        q, a, t = pq2_ops.quantize_activations(x, planes=False)
        # judged on the CPU and on CUDA tensors: reference.div_rn makes both IEEE (torch's CUDA
        # fp32 `/` is off by an ulp on ~1 value in 2000 on the H200, enough to flip a code)
        for judge in (x.cpu(), x):
            rq, ra = reference.quant_int8_group(judge)
            assert torch.equal(a.cpu(), ra.cpu()), f"{dtype} on {judge.device}: activation scales differ"
            assert torch.equal(q.cpu(), rq.cpu()), f"{dtype} on {judge.device}: int8 codes differ"


@pytest.mark.parametrize("n,k", [(5120, 6144), (14336, 5120), (4100, 1152)])
def test_exact_kernels_bit_identical_to_legacy(n, k):
    from radiance.kernels import pq2_ops

    dev = _cuda()
    layer, tens, _ = _layer(n, k, dev)
    exact = pq2_ops.prepare(tens.qweight, tens.scales, exact=True)
    legacy_only = pq2_ops.prepare(tens.qweight, tens.scales, only="pq2.legacy")
    for m in [1, 2, 5, 16, 17, 64, 100, 512]:
        x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        legacy = _run(legacy_only, x)
        assert torch.equal(_run(exact, x), legacy), f"M={m}"
        for path in _wgmma() if m > 16 else []:  # groups in order, pq2_common's epilogue
            assert torch.equal(_run(layer, x, path=path), legacy), f"{path} M={m}"


def test_split_k_deterministic_and_plan_matches_launcher():
    from radiance.kernels import pq2_ops
    from radiance.kernels.nvidia.tile import Tile

    dev = _cuda()
    a, tens, _ = _layer(5120, 17408, dev)
    b = pq2_ops.prepare(tens.qweight, tens.scales)  # fresh plans: first call goes through Triton's launcher
    for m, path, tile in [(1, "dp4a", Tile(bn=16, gpi=8, split=4)), (4, "planes", Tile(bn=64, bm=16, split=8)),
                          (300, "planes", Tile(bn=128, bm=128, warps=8)),
                          (5, "gluon", Tile(bn=128, bm=8, gpi=2, split=8, stages=1)),
                          (5, "gluon", Tile(bn=64, bm=8, gpi=1, split=4, stages=4))] \
            + [(300, p, Tile(bn=64, bm=64, stages=4)) for p in _wgmma()]:
        x = torch.randn(m, 17408, device=dev, dtype=torch.bfloat16)
        _run(a, torch.randn_like(x), path=path, tile=tile)  # compiles a's plan
        y1 = _run(a, x, path=path, tile=tile)  # direct compiled launch
        y2 = _run(a, x, path=path, tile=tile)
        y3 = _run(b, x, path=path, tile=tile)  # launcher
        assert torch.equal(y1, y2) and torch.equal(y1, y3), f"{path} M={m}"


def test_skinny_gemm():
    from radiance.kernels.nvidia.dense import skinny

    dev = _cuda()
    for n, k in [(96, 5120), (100, 1152)]:
        w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
        for m in [1, 2, 3, 7, 16]:
            x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
            y = skinny.linear(x, w)
            ref = x.double() @ w.double().t()
            err = ((y.double() - ref).norm() / ref.norm()).item()
            assert err <= 2e-3, f"skinny N={n} K={k} M={m}: rel err {err:.2e}"
            assert torch.equal(y, skinny.linear(x, w)), "split-K reduction must be deterministic"


def test_dependent_launch_bit_identical_back_to_back():
    # kernels/pdl.py: on sm_90 dp4a (M = 1) and gluon (M = 2..8) launch while the quantizer runs and
    # wait for it in the kernel. Eight calls on eight inputs in one CUDA graph (each quantizer
    # output lands where the last one was freed: a GEMM that did not wait would read the previous
    # call's), against the same calls on the layer without PDL (RADIANCE_PDL=off), bit for bit
    from dataclasses import replace

    from radiance.kernels import pq2_ops
    from radiance.testing.graphs import assert_back_to_back

    if torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("programmatic dependent launch needs sm_90+")
    dev = _cuda()
    for n, k in [(14336, 5120), (1000, 384)]:
        layer, _, _ = _layer(n, k, dev)
        off = replace(layer, pdl=False, plans={})
        for m in (1, 3, 8):
            assert pq2_ops.launches_dependent(layer, pq2_ops.choose(layer, m, dev)[0], m), f"M={m}"
            xs = [torch.randn(m, k, device=dev, dtype=torch.bfloat16) for _ in range(8)]
            want = [pq2_ops.forward(off, x) for x in xs]
            assert_back_to_back([lambda x=x: pq2_ops.forward(layer, x) for x in xs], want, f"N={n} M={m}")


@pytest.mark.parametrize("n,k", [(5120, 6144), (4100, 1152)])  # EVEN tiles and ragged ones
def test_rtx3090_choices_on_this_gpu(n, k):
    """The kernel and tile the plan picks for an sm_86 card with 82 SMs (no wgmma there: gluon,
    planes and legacy; heuristic tiles, e.g. the 8-warp prefill tile), run here for their numerics."""
    from radiance.kernels import pq2_ops, reference
    from radiance.kernels.nvidia import pq2 as table

    _, tens, _ = _layer(n, k, _cuda())
    for exact in (False, True):
        layer = pq2_ops.prepare(tens.qweight, tens.scales, exact=exact, cap=(8, 6))
        for m in MS:
            path = layer.kernels.spec(m).kernel
            tile = table.tile_for(path, n, k, m, 82, not exact, "sm_86")
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            ref = reference.pq2_linear(x.float(), tens)
            y = _run(layer, x, path=path, tile=tile)
            err = ((y.float() - ref).norm() / ref.norm()).item()
            assert err <= 2e-3, f"sm_86 exact={exact} {path} {tile} M={m}: rel err {err:.2e}"
