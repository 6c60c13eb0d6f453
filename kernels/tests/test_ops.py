"""kernels.ops: the exact CPU rows are bit-identical to the reference, the folded fast path equal to
it up to rounding; dedup, guard and dispatch errors."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from radiance.kernels import cpu_ops, methods, ops
from radiance.kernels import reference as R
from radiance.kernels.formats.paroquant import ParoTensors
from radiance.quantize import rtn


def _paro(n: int, k: int, seed: int, krot: int = 4) -> ParoTensors:
    gen = torch.Generator().manual_seed(seed)
    pairs, theta = rtn.random_rotation(k, krot, gen)
    cs = (torch.rand(1, k, generator=gen) + 0.5).half()
    return rtn.paroquant_linear_tensors(torch.randn(n, k, generator=gen), pairs, theta, cs)


def _merged(parts: list[ParoTensors]) -> ops.PreparedLinear:
    return ops.prepare_parts("paroquant", parts)


@pytest.fixture(params=["fp32", "int8"])
def cpu_weights(request, monkeypatch):
    """Both CPU weight caches (RADIANCE_CPU_WEIGHTS) must give the reference's bits."""
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", request.param)
    return request.param


@pytest.mark.parametrize("m", [1, 3, 200])  # decode and prefill bands
def test_paroquant_cpu_is_bit_identical_to_reference(m, cpu_weights):
    t = _paro(96, 256, 0)
    prep = _merged([t])
    assert ("w" in prep.data) == (cpu_weights == "fp32")
    x = torch.randn(m, 256).bfloat16()
    bias = torch.randn(96).bfloat16()
    assert torch.equal(ops.linear_forward(prep, x, bias), R.paroquant_linear(x, t, bias))


def test_merged_partitions_keep_their_own_rotation_and_dedup_identical_ones(cpu_weights):
    q, k, v = _paro(64, 256, 1), _paro(32, 256, 2), _paro(32, 256, 3)
    x = torch.randn(5, 256).bfloat16()
    prep = _merged([q, k, v])
    assert len(prep.rotations) == 3
    want = torch.cat([R.paroquant_linear(x, t) for t in (q, k, v)], 1)
    assert torch.equal(ops.linear_forward(prep, x), want)

    shared = rtn.random_rotation(256, 4, torch.Generator().manual_seed(9))
    cs = (torch.rand(1, 256) + 0.5).half()
    gate, up = (rtn.paroquant_linear_tensors(torch.randn(48, 256), *shared, cs) for _ in range(2))
    prep = _merged([gate, up])
    assert len(prep.rotations) == 1 and prep.runs == [ops.Run(0, 96, 0)]
    want = torch.cat([R.paroquant_linear(x, t) for t in (gate, up)], 1)
    assert torch.equal(ops.linear_forward(prep, x), want)


def test_partition_count_guard():
    prep = _merged([_paro(64, 256, 1), _paro(32, 256, 2)])
    xs = ops.rotate_all(prep, torch.randn(2, 256))
    with pytest.raises(ValueError, match=r"rotated activations \[\[2, 256\]\] do not match the layer's 2 distinct"):
        cpu_ops._paroquant_gemm_cpu(prep, xs[:1], None, torch.float32)
    with pytest.raises(ValueError, match="do not match"):  # a copy of the wrong K
        cpu_ops._paroquant_gemm_cpu(prep, (xs[0], xs[1][:, :128]), None, torch.float32)


def test_pq2_cpu_is_bit_identical_to_reference(cpu_weights):
    t = rtn.pq2_linear_tensors(torch.randn(80, 384, generator=torch.Generator().manual_seed(0)))
    prep = ops.prepare_parts("pq2", [t])
    assert (prep.data["codes"].dtype == torch.float32) == (cpu_weights == "fp32")
    for m in (1, 70, 300):
        x = torch.randn(m, 384).bfloat16()
        bias = torch.randn(80).bfloat16()
        assert torch.equal(ops.linear_forward(prep, x, bias), R.pq2_linear(x, t, bias))


def _rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    return float((y.float() - ref.float()).norm() / ref.float().norm())


# The folded path's tolerances against the exact reference: in fp32 only the folding's rounding
# (products of 128 terms: ~1e-6 relative); in bf16 the folded weight's and the output's rounding
# (2^-9 each, averaged over K terms: ~3e-3 relative), pq2 also its dequantized activations'.
FOLDED_REL = {torch.float32: 2e-5, torch.bfloat16: 1e-2}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("m", [1, 7, 200])
def test_paroquant_folded_matches_the_reference(m, dtype, monkeypatch):
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "folded")
    q, k, v = _paro(64, 384, 1), _paro(32, 384, 2), _paro(32, 384, 3)  # three rotations, one GEMM
    prep = _merged([q, k, v])
    x = torch.randn(m, 384).to(dtype)
    bias = torch.randn(128).to(dtype)
    want = torch.cat([R.paroquant_linear(x.float(), t) for t in (q, k, v)], 1) + bias.float()
    y = ops.linear_forward(prep, x, bias)
    assert y.dtype == dtype and _rel(y, want) < FOLDED_REL[dtype]
    assert "folded" not in prep.data and f"folded:{dtype}" in prep.data  # cast once, the fp32 copy dropped


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pq2_folded_matches_the_reference(dtype, monkeypatch):
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "folded")
    t = rtn.pq2_linear_tensors(torch.randn(80, 384, generator=torch.Generator().manual_seed(0)))
    prep = ops.prepare_parts("pq2", [t])
    for m in (1, 70, 300):
        x = torch.randn(m, 384).to(dtype)
        y = ops.linear_forward(prep, x)
        assert _rel(y, R.pq2_linear(x.float(), t)) < FOLDED_REL[dtype]


def test_bad_cpu_weights_value(monkeypatch):
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", "fp16")
    with pytest.raises(ValueError, match="RADIANCE_CPU_WEIGHTS='fp16': use folded"):
        _merged([_paro(32, 128, 0)])


def test_dense_and_platform_errors():
    w = torch.randn(16, 128).bfloat16()
    prep = ops.prepare("dense", {"weight": w})
    x = torch.randn(3, 128).bfloat16()
    assert torch.equal(ops.linear_forward(prep, x), torch.nn.functional.linear(x, w))
    with pytest.raises(ValueError, match=r"expected input \[M, 128\]"):
        ops.linear_forward(prep, torch.randn(3, 64))
    # a platform without kernels: an error naming the method and platform, never a fallback
    with pytest.raises(NotImplementedError, match="no kernels for method=dense on platform=xpu"):
        ops.prepare("dense", {"weight": w}, platform="xpu")
    with pytest.raises(NotImplementedError, match="no kernels for method=pq2 on platform=rocm"):
        ops.prepare("pq2", {"qweight": torch.zeros(16, 32, dtype=torch.uint8), "scales": torch.ones(16, 1).half()},
                    platform="rocm")
    for platform in ("cpu", "cuda", "rocm"):  # skipped modules load on every served platform
        assert platform in methods.get("dense").platforms


def test_kernels_run_without_vllm():
    code = (
        "import sys; sys.modules['vllm'] = None\n"  # any `import vllm...` now raises ImportError
        "import torch\n"
        "from radiance.kernels import ops, reference\n"
        "from radiance.quantize import rtn\n"
        "t = rtn.pq2_linear_tensors(torch.randn(8, 128))\n"
        "y = ops.linear_forward(ops.prepare_parts('pq2', [t]), torch.randn(2, 128))\n"
        "assert y.shape == (2, 8)\n"
        "assert not any(m == 'vllm' or m.startswith('vllm.') for m in sys.modules if sys.modules[m] is not None)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
