"""layout.prepare against kernels/reference.py on the CPU, read the way the kernels read it
(kernels/hip/emulate.py): records, nibble order, {scale, d}, boundaries, the zero point outside."""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import reference
from radiance.kernels.formats import FormatError
from radiance.kernels.formats.paroquant import unpack_awq
from radiance.kernels.hip import emulate
from radiance.kernels.hip.layout import prepare, weight_codes
from radiance.testing.paro_random import random_layer, rel


def _layer(n, k, seed, krot=8):
    return random_layer(n, k, torch.Generator().manual_seed(seed), krot=krot)


@pytest.mark.parametrize("wperm", [True, False])
def test_weight_codes_round_trip(wperm):
    t = _layer(96, 256, 0)
    prep = prepare([t], wperm=wperm)
    assert torch.equal(weight_codes(prep), unpack_awq(t.qweight).t())
    assert prep.wq.shape == ((96 // 16, 256 // 16, 32) if wperm else (96, 256 // 8))


@pytest.mark.parametrize("per_token", [False, True])
def test_rotate_quant_matches_reference_quantizer_bytewise(per_token):
    t = _layer(64, 384, 1, krot=5)
    x = torch.randn(7, 384, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    prep = prepare([t])
    a, asr = emulate.rotate_quant(x, prep, per_token)
    xr = reference.rotate(x, t.pairs, t.theta, t.channel_scales)
    q, scale = reference.quant_fp8_e4m3_token(xr) if per_token else reference.quant_fp8_e4m3_group(xr)
    want = q.view(torch.uint8).clone()
    want[want == 0x80] = 0
    assert torch.equal(a[0], want)
    assert torch.equal(asr[0, :, :, 0], scale.expand(7, 3))
    assert torch.equal(asr[0, :, :, 1], q.float().view(7, 3, 128).sum(-1))


@pytest.mark.parametrize("wperm", [True, False])
def test_gemm_layout_matches_reference_same_activation_quant(wperm):
    t = _layer(160, 512, 3)
    x = torch.randn(5, 512, generator=torch.Generator().manual_seed(4))
    prep = prepare([t], wperm=wperm)
    a, asr = emulate.rotate_quant(x, prep, per_token=False)
    y = emulate.gemm(a, asr, prep)
    ref = reference.paroquant_linear(x.double(), t, act="fp8_group")
    assert rel(y, ref) < 1e-5


def test_merged_linear_dedups_adjacent_rotations_and_selects_by_boundary():
    q, k_, v = _layer(128, 256, 5), _layer(64, 256, 6), _layer(64, 256, 7)
    # k and v share one rotation (adjacent, like qwen's in_proj_qkv); q has its own
    v.pairs, v.theta, v.channel_scales = k_.pairs, k_.theta, k_.channel_scales
    prep = prepare([q, k_, v])
    assert prep.rotations == 2 and (prep.pb1, prep.pb2) == (128, 1 << 30)
    x = torch.randn(3, 256, generator=torch.Generator().manual_seed(8))
    a, asr = emulate.rotate_quant(x, prep, per_token=True)
    y = emulate.gemm(a, asr, prep)
    ref = torch.cat([reference.paroquant_linear(x.double(), t, act="fp8_token") for t in (q, k_, v)], dim=1)
    assert rel(y, ref) < 1e-5


def test_prepare_refuses_what_the_gemm_cannot_take():
    with pytest.raises(FormatError, match="boundary 16 must be a multiple of 32"):
        prepare([_layer(16, 128, 9), _layer(32, 128, 10)])
    with pytest.raises(FormatError, match="takes 1..3 rotations"):
        prepare([_layer(32, 128, s) for s in range(11, 15)])
    with pytest.raises(FormatError, match="share K"):
        prepare([_layer(32, 128, 15), _layer(32, 256, 16)])


def test_dispatch_row_prepares_merged_runs_like_prepare():
    """kernels/ops.py's ("paroquant", "rocm") prepare: the plugin's merged tensors and runs."""
    from radiance.kernels import ops as kops
    from radiance.kernels.hip import paroquant as hip_paroquant
    from radiance.kernels.formats.paroquant import ParoTensors

    q, k_, v = _layer(128, 256, 20), _layer(64, 256, 21), _layer(64, 256, 22)
    v.pairs, v.theta, v.channel_scales = k_.pairs, k_.theta, k_.channel_scales
    parts = [q, k_, v]
    cat = [torch.cat([getattr(t, f) for t in parts], dim=1) for f in ("qweight", "qzeros", "scales")]
    lin = kops.prepare_parts("paroquant", parts)
    hip_paroquant.prepare(lin, ParoTensors(*cat, q.pairs, q.theta, q.channel_scales))
    prep = lin.data["hip"]
    assert prep.rotations == 2 and prep.pb1 == 128
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(23))
    a, asr = emulate.rotate_quant(x, prep, per_token=False)
    ref = torch.cat([reference.paroquant_linear(x.double(), t, act="fp8_group") for t in parts], dim=1)
    assert rel(emulate.gemm(a, asr, prep), ref) < 1e-5
