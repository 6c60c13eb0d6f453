"""pq2's fused producers (the activation quantizer, kernels/triton/pq2_quant.py, computing its input
from the op before the linear) on a CUDA GPU against the unfused pair: reference.py's op in torch,
then the quantizer. Tolerances:
- silu-mul: the int8 codes, scales and group sums bit-identical (torch's own expf, IEEE division
  and roundings);
- the norm: bit-identical where it is exact in both (inputs on a 1/8 grid, K a power of two);
  elsewhere the dequantized activations <= 2e-3 relative (another summation order: a normalized
  value may round the other way); the residual out bit-identical;
- the layer through `forward_produced` vs `forward` on the unfused output: <= 2e-3, bf16 and fp16.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def gen():
    return torch.Generator(device="cuda").manual_seed(5)


def _dequant(q, a, t):
    m, k = q.shape
    return q.float().view(m, k // 128, 128) * a.unsqueeze(-1)


def _norm_inputs(m, k, dtype, gen, exact):
    """x, residual [M, K] and the norm weight [K]."""
    if exact:  # on a 1/8 grid: the sums of squares exact in fp32
        x, r, w = [(torch.randint(-16, 17, (m, k), device="cuda", generator=gen) / 8).to(dtype) for _ in range(3)]
    else:
        x, r, w = [torch.randn(m, k, device="cuda", generator=gen).to(dtype) for _ in range(3)]
    return x, r, w[0].contiguous()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k", [384, 5120, 17408])
@pytest.mark.parametrize("planes", [True, False])
def test_silu_mul_quant_codes_identical(k, planes, dtype, gen):
    from radiance.kernels import pq2_ops, reference
    from radiance.kernels.producers import SiluMul

    for m in (1, 3, 16):
        gu = (torch.randn(m, 2 * k, device="cuda", generator=gen) * 3).to(dtype)
        got = pq2_ops.quantize_activations(gu, planes, producer=SiluMul(gu))
        want = pq2_ops.quantize_activations(reference.silu_mul(gu), planes)
        for g, w, what in zip(got, want, ("codes", "scales", "group sums")):
            assert torch.equal(g, w), f"M={m}: {what} differ"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("k,exact", [(512, True), (4096, True), (896, False), (5120, False), (17408, False)])
@pytest.mark.parametrize("residual", [True, False])
def test_norm_quant_matches_unfused(k, exact, residual, dtype, gen):
    from radiance.kernels import pq2_ops, reference
    from radiance.kernels.producers import AddRmsNorm

    for m in (1, 2, 7):
        x, res, w = _norm_inputs(m, k, dtype, gen, exact)
        res = res if residual else None
        p = AddRmsNorm(x, res, w, 1e-6)
        got = pq2_ops.quantize_activations(x, True, producer=p)
        normed, ro = reference.add_rms_norm(x, res, w, 1e-6)
        want = pq2_ops.quantize_activations(normed, True)
        if residual:
            assert torch.equal(p.residual_out, ro)
        if exact:
            for g, wt, what in zip(got, want, ("codes", "scales", "group sums")):
                assert torch.equal(g, wt), f"M={m}: {what} differ"
        else:
            err = float((_dequant(*got) - _dequant(*want)).norm() / _dequant(*want).norm())
            assert err <= 2e-3, f"M={m}: {err:.2e}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("n,k", [(1024, 896), (5120, 5120), (896, 4864)])
def test_pq2_forward_produced(n, k, dtype, gen):
    from radiance.kernels import pq2_ops, reference
    from radiance.kernels.producers import AddRmsNorm, SiluMul

    qw = torch.randint(0, 256, (n, k // 4), device="cuda", generator=gen, dtype=torch.int32).to(torch.uint8)
    layer = pq2_ops.prepare(qw, (torch.rand(n, k // 128, device="cuda", generator=gen) * 0.02 + 0.01).half())
    for m in (1, 3, 16, 40):  # fused to 16 rows (pq2_ops.PRODUCER_MAX_M); above: the unfused kernels
        x, res, w = _norm_inputs(m, k, dtype, gen, False)
        gu = torch.randn(m, 2 * k, device="cuda", generator=gen).to(dtype)
        y = pq2_ops.forward_produced(layer, AddRmsNorm(x, res, w, 1e-6))
        ref = pq2_ops.forward(layer, reference.add_rms_norm(x, res, w, 1e-6)[0])
        assert float((y.float() - ref.float()).norm() / ref.float().norm()) <= 2e-3, f"norm M={m}"
        y = pq2_ops.forward_produced(layer, SiluMul(gu))
        ref = pq2_ops.forward(layer, reference.silu_mul(gu))
        assert float((y.float() - ref.float()).norm() / ref.float().norm()) <= 2e-3, f"silu-mul M={m}"
