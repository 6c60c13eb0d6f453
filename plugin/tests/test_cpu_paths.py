"""The CPU fast paths on vLLM's own CPU GEMMs (plugin/cpu_gemm.py) against the exact reference:
folded (vLLM's bf16 GEMM on the folded weight) and int4 (the rotation as one block product, then
vLLM's CPU int4 GEMM per run of output columns). Tolerance: bf16 rounding of the weights / rotated
activations and the output, ~3e-3 relative (kernels/tests/test_ops.py states it)."""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import ops
from radiance.kernels import reference as R
from radiance.quantize import rtn

pytestmark = pytest.mark.integration  # real vLLM kernels, in process


def _paro(n: int, k: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    pairs, theta = rtn.random_rotation(k, 4, gen)
    cs = (torch.rand(1, k, generator=gen) + 0.5).half()
    return rtn.paroquant_linear_tensors(torch.randn(n, k, generator=gen) / k**0.5, pairs, theta, cs)


@pytest.mark.parametrize("mode", ["folded", "int4"])
def test_fast_cpu_paths_match_the_reference(mode, vllm_dist, monkeypatch):
    from radiance.plugin.cpu_gemm import use_vllm_gemm

    from radiance.plugin.cpu_host import int4_gemm_available

    if mode == "int4" and not int4_gemm_available():
        pytest.skip("vLLM has no CPU int4 GEMM for this CPU (its AVX-512 kernels only; the refusal: "
                    "test_cpu_gemm_branches.py)")
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", mode)
    parts = [_paro(128, 384, 1), _paro(64, 384, 2), _paro(64, 384, 3)]  # three rotations: three runs
    prep = ops.prepare_parts("paroquant", parts)
    layer = torch.nn.Module()
    layer.params_dtype, layer.bias = torch.bfloat16, None
    use_vllm_gemm(layer, prep)
    assert (prep.gemm is not None) == (mode == "folded") and len(prep.run_gemms) == (3 if mode == "int4" else 0)
    assert not {"folded", "qweight"} & set(prep.data)  # vLLM's kernels hold the only copy of the weights
    from radiance.kernels.cpu_folded import direct_gemm

    assert direct_gemm(prep) is (prep.gemm if mode == "folded" else None)  # folded: the plugin calls it without the op
    for m in (1, 5, 130):
        x = torch.randn(m, 384).bfloat16()
        bias = torch.randn(256).bfloat16()
        want = torch.cat([R.paroquant_linear(x.float(), p) for p in parts], 1) + bias.float()
        for y in (ops.linear_forward(prep, x, bias), prep.gemm(x, bias) if prep.gemm else None):
            if y is not None:
                assert y.dtype == torch.bfloat16
                assert float((y.float() - want).norm() / want.norm()) < 1e-2, (mode, m)
