"""The fused producers of the HIP rotation (`pq_produce`: residual add + RMSNorm, or silu(gate) * up,
computed inside pq_rotate_quant) built as CUDA on an NVIDIA GPU, against the unfused pair: the op
alone (kernels/reference.py), then pq_rotate_quant. Both modes (per-group at decode, per-token
above), bf16 and f16, one to three rotated copies, odd M.

Tolerances: silu-mul computes torch's own fp32 arithmetic (expf, IEEE division, the two roundings),
so its codes and scales are byte-identical to the unfused pair on this GPU. The norm's row sum of
squares is another order than torch's, so a normalized value may land an ulp of the dtype apart and
an e4m3 code with it: on random data the layer outputs agree within 2e-3 relative (the issue's
bound), and where the norm is exact in both (every |x + residual| = 2, eps making mean + eps = 16)
the codes and scales are byte-identical. The residual out is the same fp32 sum rounded: bit-identical.
"""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import ops, reference, warmup
from radiance.kernels.hip import lib as pqlib
from radiance.kernels.hip.layout import prepare
from radiance.kernels.linear_spec import LinearSpec
from radiance.kernels.producers import AddRmsNorm, SiluMul
from radiance.testing.paro_random import random_layer, rel

pytestmark = pytest.mark.gpu
DEV = "cuda"
K = 640
CASES = {"one": [96], "qkv": [256, 128, 128]}  # output widths per rotated copy


def _prep(lib, widths, seed):
    gen = torch.Generator().manual_seed(seed)
    parts = []
    for n in widths:
        t = random_layer(n, K, gen, krot=8)
        parts.append(type(t)(*(getattr(t, f).to(DEV) for f in ("qweight", "qzeros", "scales", "pairs", "theta",
                                                                "channel_scales"))))
    return prepare(parts, wperm=lib.wperm)


def _inputs(kind: str, m: int, dtype, exact: bool, seed: int):
    """(producer, its unfused output, the unfused residual out or None); exact: the norm's inputs
    make every step of it exact (|x + residual| = 2 everywhere, mean + eps = 16)."""
    g = torch.Generator().manual_seed(seed)
    if kind == "silu_mul":
        gu = (torch.randn(m, 2 * K, generator=g) * 2).to(dtype).to(DEV)
        return SiluMul(gu), reference.silu_mul(gu), None
    w = (torch.rand(K, generator=g) + 0.5).to(dtype)
    if exact:
        sign = torch.randint(0, 2, (m, K), generator=g) * 2 - 1
        x, res, eps = (sign * 1.5).to(dtype), (sign * 0.5).to(dtype), 12.0
        if kind == "norm":
            x = (sign * 2.0).to(dtype)
    else:
        x, res, eps = (torch.randn(m, K, generator=g) * 3).to(dtype), torch.randn(m, K, generator=g).to(dtype), 1e-6
    res = res if kind == "add_norm" else None
    y, r = reference.add_rms_norm(x, res, w, eps)  # on the CPU: exactly rounded rsqrt
    dev = lambda t: None if t is None else t.to(DEV)  # noqa: E731
    return AddRmsNorm(dev(x), dev(res), dev(w), eps), y.to(DEV), dev(r)


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("m", [1, 7, 33, 80])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("kind", ["add_norm", "norm", "silu_mul"])
def test_produce_matches_the_unfused_pair(lib, kind, dtype, m, case):
    prep = _prep(lib, CASES[case], 7)
    per_token = m > 64
    for exact in (True, False) if kind != "silu_mul" else (False,):
        p, plain, res_out = _inputs(kind, m, dtype, exact, seed=m)
        a, asr = pqlib.produce(lib, p, prep, per_token)
        ar, asrr = pqlib.rotate_quant(lib, plain, prep, per_token)
        if res_out is not None:
            assert torch.equal(p.residual_out, res_out)
        else:
            assert getattr(p, "residual_out", None) is None
        if exact or kind == "silu_mul":
            bad = int((a != ar).sum())
            assert bad == 0, f"{bad} of {a.numel()} codes differ (exact={exact})"
            assert torch.equal(asr, asrr)
        y = pqlib.produced_linear(lib, _inputs(kind, m, dtype, exact, seed=m)[0], prep)
        assert rel(y, pqlib.linear(lib, plain, prep)) <= 2e-3, f"exact={exact}"


@pytest.mark.parametrize("method", ["paroquant", "paroquant_mxfp4"])
@pytest.mark.parametrize("m", [3, 65])
def test_rocm_registry_runs_the_producer(lib, method, m, monkeypatch):
    """ops.produced_forward on a layer prepared for the "rocm" platform (the HIP library loaded as
    the plugin loads it): the producer + GEMM against the unfused op and the layer's own forward."""
    from radiance.kernels.hip import ops as hip_ops

    monkeypatch.setenv("RADIANCE_PQ_WPERM", "1" if lib.wperm else "0")  # the layout the library reads
    hip_ops.set_library(lib.path)
    spec = LinearSpec(method, (128, 256), K, True, "bfloat16")
    prep = warmup.synthetic(spec, torch.device(DEV), seed=3, platform="rocm")
    assert ops.can_produce(prep) == (True, "")
    bias = torch.randn(spec.n, device=DEV).to(torch.bfloat16)
    for kind in ("add_norm", "silu_mul"):
        p, plain, _ = _inputs(kind, m, torch.bfloat16, False, seed=11)
        y = ops.produced_forward(prep, p, bias)
        assert rel(y, ops.linear_forward(prep, plain, bias)) <= 2e-3
