"""paroquant_mxfp4 (MXFP4-PARO): the format's packing and checks, the OCP quantizer, the exact
reference, and the CPU rows of kernels.ops against it (exact modes bit for bit, folded within the
folding's rounding: test_ops.FOLDED_REL, stated there)."""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import ops
from radiance.kernels import reference as R
from radiance.kernels.formats import FormatError
from radiance.kernels.formats import paroquant_mxfp4 as mx
from radiance.kernels.tests.test_ops import FOLDED_REL
from radiance.quantize import rtn


def _mx(n: int, k: int, seed: int, krot: int = 4) -> mx.Mxfp4Tensors:
    gen = torch.Generator().manual_seed(seed)
    pairs, theta = rtn.random_rotation(k, krot, gen)
    cs = (torch.rand(1, k, generator=gen) + 0.5).half()
    return rtn.paroquant_mxfp4_linear_tensors(torch.randn(n, k, generator=gen), pairs, theta, cs)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).norm() / b.float().norm())


def test_packing_puts_the_even_index_in_the_low_nibble_and_round_trips():
    codes = torch.randint(0, 16, (6, 64), dtype=torch.uint8)
    packed = mx.pack_e2m1(codes)
    assert packed.shape == (6, 32) and int(packed[0, 0]) == int(codes[0, 0]) | int(codes[0, 1]) << 4
    assert torch.equal(mx.unpack_e2m1(packed), codes)


def test_dequant_is_the_e2m1_value_times_the_e8m0_power_of_two():
    codes = torch.tensor([list(range(16)) * 2], dtype=torch.uint8)  # one block of 32
    w = R.dequant_mxfp4(mx.pack_e2m1(codes), torch.tensor([[127 + 3]], dtype=torch.uint8))
    mags = torch.tensor(mx.E2M1) * 8
    assert torch.equal(w[0, :16], torch.cat((mags, -mags)))


def test_ocp_rule_scales_each_block_to_its_max_and_clips_above_six():
    w = torch.zeros(2, 32)
    w[0, :4] = torch.tensor([5.0, -0.3, 0.74, 7.9])  # amax 7.9: e = floor(log2 7.9) - 2 = 0
    w[1, 0] = 1e-3  # a tiny block keeps its own exponent
    codes, scales = rtn.mxfp4_ocp(w)
    assert scales.tolist() == [[127], [127 + (-10 - 2)]]
    got = R.dequant_mxfp4(mx.pack_e2m1(codes), scales)
    assert got[0, :4].tolist() == [4.0, -0.5, 0.5, 6.0]  # 5 ties to the even code (4), 7.9 clips to 6
    assert got[1, 0] == pytest.approx(1e-3, rel=0.26)
    assert torch.equal(rtn.mxfp4_ocp(torch.zeros(1, 32))[1], torch.zeros(1, 1, dtype=torch.uint8))


def test_quantizer_error_is_that_of_a_4_bit_grid():
    w = torch.randn(64, 512, generator=torch.Generator().manual_seed(0))
    codes, scales = rtn.mxfp4_ocp(w)
    assert 0.05 < _rel(R.dequant_mxfp4(mx.pack_e2m1(codes), scales), w) < 0.15


def test_validate_names_the_tensor_and_the_expectation():
    t = _mx(32, 256, 0)
    mx.validate(t, "m.q_proj")
    bad = mx.Mxfp4Tensors(t.weight, t.weight_scale[:, :4].contiguous(), t.pairs, t.theta, t.channel_scales)
    with pytest.raises(FormatError, match=r"m.q_proj.weight_scale: expected shape \[32, 8\] torch.uint8, got \[32, 4\]"):
        mx.validate(bad, "m.q_proj")
    nan = t.weight_scale.clone()
    nan[3, 1] = 255
    with pytest.raises(FormatError, match="e8m0 NaN"):
        mx.validate(mx.Mxfp4Tensors(t.weight, nan, t.pairs, t.theta, t.channel_scales), "m.q_proj")
    with pytest.raises(FormatError, match="group_size must be 32"):
        mx.validate_config("config.json quantization_config", 4, 128)


def test_reference_equals_the_rotated_dense_form():
    """((x * cs) R^T) W_rot^T with W_rot quantized from rotate(W / cs): the quantized model is W's."""
    t = _mx(48, 256, 1)
    x = torch.randn(5, 256, dtype=torch.float64)
    w_rot = R.dequant_mxfp4(t.weight, t.weight_scale, torch.float64)
    direct = R.rotate(x, t.pairs, t.theta, t.channel_scales) @ w_rot.t()
    assert torch.allclose(R.paroquant_mxfp4_linear(x, t), direct, rtol=0, atol=1e-12)


def _merged(parts: list[mx.Mxfp4Tensors]) -> ops.PreparedLinear:
    return ops.prepare_parts("paroquant_mxfp4", parts)


@pytest.mark.parametrize("mode", ["fp32", "int8"])
@pytest.mark.parametrize("m", [1, 3, 200])
def test_exact_cpu_rows_are_bit_identical_to_the_reference(m, mode, monkeypatch):
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", mode)
    q, k, v = _mx(64, 256, 1), _mx(32, 256, 2), _mx(40, 256, 3)  # odd N: 40
    prep = _merged([q, k, v])
    assert prep.method == "paroquant_mxfp4" and len(prep.rotations) == 3
    x, bias = torch.randn(m, 256).bfloat16(), torch.randn(136).bfloat16()
    want = torch.cat([R.paroquant_mxfp4_linear(x, t) for t in (q, k, v)], 1)
    assert torch.equal(ops.linear_forward(prep, x), want)
    one = _merged([q])
    assert torch.equal(ops.linear_forward(one, x, bias[:64]), R.paroquant_mxfp4_linear(x, q, bias[:64]))


@pytest.mark.parametrize("mode", ["folded", "int4"])  # e2m1 takes no int4 GEMM: int4 runs folded
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_folded_cpu_row_matches_the_reference(dtype, mode, monkeypatch):
    monkeypatch.setenv("RADIANCE_CPU_WEIGHTS", mode)
    q, k = _mx(64, 384, 1), _mx(24, 384, 2)
    prep = _merged([q, k])
    assert "folded" in prep.data
    for m in (1, 7, 200):
        x = torch.randn(m, 384).to(dtype)
        want = torch.cat([R.paroquant_mxfp4_linear(x.float(), t) for t in (q, k)], 1)
        y = ops.linear_forward(prep, x)
        assert y.dtype == dtype and _rel(y, want) < FOLDED_REL[dtype]


def test_gfx1201_row_prepares_the_hip_layout():
    """kernels/ops.py's ("paroquant_mxfp4", "rocm") row: the HIP layout (kernels/hip/mxfp4.py), planned
    on CPU tensors (what the plugin hands it on an R9700)."""
    t = _mx(32, 256, 0)
    prep = ops.prepare_parts("paroquant_mxfp4", [t], platform="rocm")
    assert prep.data["hip_mxfp4"].out_features == 32
