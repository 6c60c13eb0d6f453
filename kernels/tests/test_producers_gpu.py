"""Fused producers (kernels/triton/paro_producers.py) on a CUDA GPU against the unfused ops.

Unfused = reference.add_rms_norm / reference.silu_mul in torch, then the prologue
(paro_rotate.rotate) or the layer's forward. Tolerances:
- the residual out: bit-identical (one fp32 add, one rounding, in both);
- every prologue output format, dequantized: <= 2e-3 relative (the norm's sum is taken in another
  order, and rsqrt / expf may differ by an ulp, so a normalized value may round the other way);
- where the norm is exact in both (inputs on a 1/8 grid, K a power of two, so the sum of squares
  and the mean are exact) the W4A8 codes and scales, and the layer outputs, are bit-identical:
  the producer runs the prologue's own rotation and quantization code;
- the layer through `forward_produced` vs `forward` on the unfused output: <= 2e-3, bf16 and fp16.
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.gpu

MS = (1, 2, 3, 4, 7, 16)


@pytest.fixture(scope="module")
def gen():
    return torch.Generator(device="cuda").manual_seed(99)


def _tables(k, parts, gen, krot=8):
    from radiance.kernels.triton import paro_rotate as pr
    from radiance.testing import paro_random as rnd

    return pr.build_tables([rnd.rotation_of(rnd.random_layer(128, k, gen, krot)) for _ in range(parts)])


def _values(mode, a, s, rs):
    """The rotated activations a format holds, in the channel order the format stores them."""
    from radiance.kernels.triton import paro_rotate as pr

    if mode in (pr.F16G, pr.I8G, pr.F16GF):
        p, m, k = a.shape
        return (a.float().view(p, m, k // 128, 128) * s.unsqueeze(-1)).view(p, m, k)
    return a.float()


def _rel(y, ref):
    return float((y.float() - ref.float()).norm() / ref.float().norm().clamp_min(1e-30))


def _inputs(m, k, dtype, gen, exact=False):
    if exact:  # on a 1/8 grid: sums of squares exact in fp32
        return [(torch.randint(-16, 17, (m, k), device="cuda", generator=gen) / 8).to(dtype) for _ in range(2)]
    return [torch.randn(m, k, device="cuda", generator=gen, dtype=torch.float32).to(dtype) for _ in range(2)]


MODES = ("ROT32", "F16G", "I8G", "PLAIN", "ROT32P", "F16GF", "PLAINW")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k,parts,krot", [(896, 1, 8), (5120, 3, 8), (384, 2, 3), (17408, 1, 8)])
@pytest.mark.parametrize("residual", [True, False])
def test_add_norm_rotate_matches_unfused(k, parts, krot, residual, dtype, gen):
    from radiance.kernels import reference
    from radiance.kernels.triton import paro_producers as pp
    from radiance.kernels.triton import paro_rotate as pr

    tab = _tables(k, parts, gen, krot)
    w = (1 + 0.2 * torch.randn(k, device="cuda", generator=gen)).to(dtype)
    for m in MS:
        x, res = _inputs(m, k, dtype, gen)
        res = res if residual else None
        want_x, want_r = reference.add_rms_norm(x, res, w, 1e-6)
        for name in MODES:
            mode = getattr(pr, name)
            got, ro = pp.add_norm_rotate(x, res, w, 1e-6, tab, mode)
            want = pr.rotate(want_x, tab, mode)
            assert _rel(_values(mode, *got), _values(mode, *want)) <= 2e-3, (name, m)
            if got[2] is not None and name != "ROT32P":
                assert _rel(got[2], want[2]) <= 2e-3, (name, m, "row sums")
            if residual:
                assert torch.equal(ro, want_r), (name, m)


@pytest.mark.parametrize("k,parts", [(512, 1), (4096, 3), (1024, 2)])
def test_codes_identical_where_the_norm_is_exact(k, parts, gen):
    from radiance.kernels import reference
    from radiance.kernels.triton import paro_producers as pp
    from radiance.kernels.triton import paro_rotate as pr

    tab = _tables(k, parts, gen)
    w = (torch.randint(-8, 9, (k,), device="cuda", generator=gen) / 4).to(torch.bfloat16)
    for m in MS:
        x, res = _inputs(m, k, torch.bfloat16, gen, exact=True)
        normed, _ = reference.add_rms_norm(x, res, w, 1e-6)
        (a, s, rs), _ = pp.add_norm_rotate(x, res, w, 1e-6, tab, pr.I8G)
        wa, ws, wrs = pr.rotate(normed, tab, pr.I8G)
        assert torch.equal(a, wa) and torch.equal(s, ws) and torch.equal(rs, wrs), m
        gu = torch.cat(_inputs(m, k, torch.bfloat16, gen), dim=1)
        a, s, rs = pp.silu_mul_rotate(gu, tab, pr.I8G)
        wa, ws, wrs = pr.rotate(reference.silu_mul(gu), tab, pr.I8G)
        assert torch.equal(a, wa) and torch.equal(s, ws), m  # torch's silu rounding, reproduced


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k,parts", [(896, 1), (4864, 1), (5120, 2)])
def test_silu_mul_rotate_matches_unfused(k, parts, dtype, gen):
    from radiance.kernels import reference
    from radiance.kernels.triton import paro_producers as pp
    from radiance.kernels.triton import paro_rotate as pr

    tab = _tables(k, parts, gen)
    for m in MS:
        gu = torch.cat(_inputs(m, k, dtype, gen), dim=1) * 3
        for name in MODES:
            mode = getattr(pr, name)
            got = pp.silu_mul_rotate(gu, tab, mode)
            want = pr.rotate(reference.silu_mul(gu), tab, mode)
            assert _rel(_values(mode, *got), _values(mode, *want)) <= 2e-3, (name, m)


def _paro(sizes, k, gen, i8):
    from radiance.kernels import paro_ops
    from radiance.testing import paro_random as rnd

    os.environ["RADIANCE_PQ_I8"] = "1" if i8 else "0"
    try:
        return paro_ops.prepare(*rnd.merged([rnd.random_layer(n, k, gen) for n in sizes]))
    finally:
        os.environ.pop("RADIANCE_PQ_I8", None)


@pytest.mark.parametrize("i8", [False, True])
@pytest.mark.parametrize("sizes,k", [([6144, 1024, 1024], 4096), ([2048, 2048], 1024), ([1000], 1280)])
def test_layer_forward_produced(sizes, k, i8, gen):
    """The layer fed by each producer vs the layer's forward on the unfused output; bit-identical
    on exact inputs (the same codes into the same GEMM), <= 2e-3 on random ones, in bf16 and fp16;
    above the producers' rows, the unfused path itself."""
    from radiance.kernels import paro_ops, reference
    from radiance.kernels.producers import AddRmsNorm, SiluMul
    from radiance.kernels.triton.paro_producers import FUSED_MAX_M

    layer = _paro(sizes, k, gen, i8)
    for dtype in (torch.bfloat16, torch.float16):
        w = (1 + 0.1 * torch.randn(k, device="cuda", generator=gen)).to(dtype)
        for m in (*MS, FUSED_MAX_M["silu_mul"] + 1, 40):
            exact = dtype == torch.bfloat16 and k & (k - 1) == 0
            x, res = _inputs(m, k, dtype, gen, exact=exact)
            p = AddRmsNorm(x, res, w, 1e-6)
            y = paro_ops.forward_produced(layer, p)
            normed, want_r = reference.add_rms_norm(x, res, w, 1e-6)
            want = paro_ops.forward(layer, normed)
            assert torch.equal(y, want) if exact else _rel(y, want) <= 2e-3, (dtype, m)
            assert torch.equal(p.residual_out, want_r)
            gu = torch.cat(_inputs(m, k, dtype, gen), dim=1)
            y = paro_ops.forward_produced(layer, SiluMul(gu))
            assert _rel(y, paro_ops.forward(layer, reference.silu_mul(gu))) <= 2e-3, (dtype, m, "silu")


@pytest.mark.parametrize("fp8", [False, True])
def test_mxfp4_forward_produced(fp8, gen):
    from radiance.kernels import mxfp4_ops, reference
    from radiance.kernels.producers import AddRmsNorm, SiluMul
    from radiance.testing import mxfp4_random

    layer = mxfp4_ops.prepare(*mxfp4_random.merged([mxfp4_random.random_layer(n, 2048, gen) for n in (3072, 512, 512)]),
                              fp8=fp8)
    w = (1 + 0.1 * torch.randn(2048, device="cuda", generator=gen)).to(torch.bfloat16)
    for m in MS:
        x, res = _inputs(m, 2048, torch.bfloat16, gen)
        y = mxfp4_ops.forward_produced(layer, AddRmsNorm(x, res, w, 1e-6))
        assert _rel(y, mxfp4_ops.forward(layer, reference.add_rms_norm(x, res, w, 1e-6)[0])) <= 2e-3, m
        gu = torch.cat(_inputs(m, 2048, torch.bfloat16, gen), dim=1)
        y = mxfp4_ops.forward_produced(layer, SiluMul(gu))
        assert _rel(y, mxfp4_ops.forward(layer, reference.silu_mul(gu))) <= 2e-3, m


def test_producer_and_gemm_replay_in_a_cuda_graph(gen):
    """Captured as vLLM captures decode (with PDL where the GEMM launches dependent): the replay
    on new inputs gives what a direct call gives."""
    from radiance.kernels import paro_ops
    from radiance.kernels.producers import AddRmsNorm
    from radiance.testing.graphs import replayed

    layer = _paro([5120, 1024, 1024], 5120, gen, False)
    w = torch.ones(5120, device="cuda", dtype=torch.bfloat16)
    for m in (1, 4, 16):
        x, res = _inputs(m, 5120, torch.bfloat16, gen)
        y = replayed(lambda: paro_ops.forward_produced(layer, AddRmsNorm(x, res, w, 1e-6)))
        x.copy_(torch.randn_like(x))
        y2 = replayed(lambda: paro_ops.forward_produced(layer, AddRmsNorm(x, res, w, 1e-6)))
        assert torch.equal(y2, paro_ops.forward_produced(layer, AddRmsNorm(x, res, w, 1e-6))) and not torch.equal(y, y2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [896, 5120, 17408, 384])
def test_unfused_kernels_match_reference(k, dtype, gen):
    """The norm and silu*mul kernels the fused ops run above their bands: the residual out
    bit-identical, the outputs <= 2e-3, and bit-identical where the norm is exact (a 1/8 grid,
    K a power of two) and for silu*mul (torch's expf and IEEE division)."""
    from radiance.kernels import reference
    from radiance.kernels.triton import paro_producers as pp

    w = (1 + 0.2 * torch.randn(k, device="cuda", generator=gen)).to(dtype)
    for m in (1, 17, 40, 300):
        for exact in (False, True):
            x, res = _inputs(m, k, dtype, gen, exact=exact)
            for r in (res, None):
                y, ro = pp.add_norm(x, r, w, 1e-6)
                want, want_r = reference.add_rms_norm(x, r, w, 1e-6)
                assert torch.equal(y, want) if exact and k & (k - 1) == 0 else _rel(y, want) <= 2e-3, (m, exact)
                assert r is None or torch.equal(ro, want_r)
        gu = torch.cat(_inputs(m, k, dtype, gen), dim=1) * 3
        assert torch.equal(pp.silu_mul(gu), reference.silu_mul(gu)), m
