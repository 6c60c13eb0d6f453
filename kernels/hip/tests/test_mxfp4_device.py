"""The MXFP4 GEMM (pq_mxfp4_gemm.hip) built as CUDA (the WMMA emulated with the gfx12 wave32 fragment
layout) against kernels/reference.py on an NVIDIA GPU, as test_device.py checks the int4 one: the
linear within 2e-3 of the reference of the same activation quantization (bf16 out against the
reference rounded to bf16; f16 out against the exact fp32 reference), and within 1e-3 of the torch
model of the kernels (mxfp4_emulate) fed the kernel's own codes. Every kernel variant: the fold and
the per-block fallback, decode (split-K) and prefill (per-group and per-token scales), odd M,
merged linears, both weight layouts.

PQ_HIP_TEST_LIB / PQ_HIP_TEST_LIB_WPERM0: prebuilt libraries (same sources, nvcc); else built here.
"""

from __future__ import annotations

import pytest
import torch

from radiance.kernels.hip import lib as pqlib
from radiance.kernels.hip import mxfp4_emulate
from radiance.kernels.hip.mxfp4_layout import prepare
from radiance.testing.mxfp4_random import random_layer, reference_merged
from radiance.testing.paro_random import rel

pytestmark = pytest.mark.gpu
DEV = "cuda"
TOL = 2e-3  # against the reference (bf16 out vs the reference rounded to bf16; f16 out vs exact fp32)
TOL_EMULATED = 1e-3  # f16 out against the torch model fed the kernel's own codes


def _parts(widths, k, seed, krot=8, e_spread=3):
    gen = torch.Generator().manual_seed(seed)
    return [_to(random_layer(n, k, gen, krot=krot, e_spread=e_spread)) for n in widths]


def _to(t):
    return type(t)(*(getattr(t, f).to(DEV) for f in ("weight", "weight_scale", "pairs", "theta", "channel_scales")))


def _act(per_token: bool) -> str:
    return "fp8_token" if per_token else "fp8_group"


CASES = [  # (partition widths, K)
    ([48], 384),  # three 16-column tiles: less than one workgroup
    ([96], 256),
    ([384], 1024),
    ([512, 128, 128], 896),  # qkv-like, three rotations
    ([4864, 4864], 896),  # gate_up-like
    ([896], 4864),  # down-like
]
_PREPARED: dict = {}


def _case(lib, case: int, per_block: bool):
    key = (case, lib.wperm, per_block)
    if key not in _PREPARED:
        widths, k = CASES[case]
        parts = _parts(widths, k, 100 + case)
        _PREPARED[key] = parts, prepare(parts, wperm=lib.wperm, per_block=per_block or None)
    return _PREPARED[key]


@pytest.mark.parametrize("per_block", [False, True], ids=["fold", "blk"])
@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("m", [1, 5, 33, 64, 65, 200])
def test_linear_vs_reference_same_activation_quant(lib, case, m, per_block):
    parts, prep = _case(lib, case, per_block)
    assert prep.per_block == per_block
    k = prep.in_features
    x = torch.randn(m, k, device=DEV).to(torch.bfloat16)
    decode = m <= 64
    ref = reference_merged(x, parts, _act(not decode))
    y = pqlib.linear(lib, x, prep)
    assert y.dtype == torch.bfloat16 and y.shape == ref.shape
    assert rel(y, ref.to(torch.bfloat16)) <= TOL
    a, asr = pqlib.rotate_quant(lib, x, prep, per_token=not decode)
    y16 = pqlib.mxfp4_gemm(lib, a, asr, prep, torch.float16, decode=decode, per_token=not decode)
    assert rel(y16, ref) <= TOL
    assert rel(y16, mxfp4_emulate.gemm(a, asr, prep, per_token=not decode)) <= TOL_EMULATED


@pytest.mark.parametrize("per_block", [False, True], ids=["fold", "blk"])
@pytest.mark.parametrize("nsplit", [1, 2, 7])
def test_decode_split_k_is_the_same_sum(lib, nsplit, per_block):
    parts, prep = _case(lib, 3, per_block)
    x = torch.randn(9, 896, device=DEV).to(torch.float16)
    a, asr = pqlib.rotate_quant(lib, x, prep, per_token=False)
    y = pqlib.mxfp4_gemm(lib, a, asr, prep, torch.float16, decode=True, nsplit=nsplit)
    assert rel(y, reference_merged(x, parts, "fp8_group")) <= TOL


@pytest.mark.parametrize("per_block", [False, True], ids=["fold", "blk"])
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("decode", [False, True])
def test_both_bands_take_both_scale_granularities(lib, decode, per_token, per_block):
    """Band and activation-scale granularity are independent: each kernel family reads either."""
    parts, prep = _case(lib, 1, per_block)
    x = torch.randn(3, 256, device=DEV).to(torch.bfloat16)
    a, asr = pqlib.rotate_quant(lib, x, prep, per_token=per_token)
    y = pqlib.mxfp4_gemm(lib, a, asr, prep, torch.float16, decode=decode, per_token=per_token and not decode)
    assert rel(y, reference_merged(x, parts, _act(per_token))) <= TOL


@pytest.mark.parametrize("m", [7, 130])
def test_wide_exponent_spread_takes_the_per_block_kernels(lib, m):
    """A checkpoint whose blocks span more binades than the fold holds: prepare picks per_block and
    the result is still the reference's."""
    parts = _parts([256, 128], 512, 7, e_spread=20)
    prep = prepare(parts, wperm=lib.wperm)
    assert prep.per_block
    x = torch.randn(m, 512, device=DEV).to(torch.bfloat16)
    ref = reference_merged(x, parts, _act(m > 64))
    assert rel(pqlib.linear(lib, x, prep), ref.to(torch.bfloat16)) <= TOL


def test_platform_forward_with_bias(lib, monkeypatch):
    """kernels/hip/mxfp4.py's prepare/forward pair on the plugin's PreparedLinear."""
    from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
    from radiance.kernels.hip import mxfp4, ops
    from radiance.kernels.linear import PreparedLinear, Rotation, dedup_rotations

    monkeypatch.setenv("RADIANCE_PQ_WPERM", "1" if lib.wperm else "0")  # the layout the entry prepares
    ops.set_library(lib.path)
    parts = _parts([128, 64, 64], 512, 8)
    distinct, runs = dedup_rotations([Rotation.of(t) for t in parts], [t.out_features for t in parts])
    lin = PreparedLinear("paroquant_mxfp4", "rocm", 512, 256, rotations=distinct, runs=runs)
    r = distinct[0]
    mxfp4.prepare(lin, Mxfp4Tensors(torch.cat([t.weight for t in parts]), torch.cat([t.weight_scale for t in parts]),
                                    r.pairs, r.theta, r.channel_scales))
    bias = torch.randn(256, device=DEV)
    for m in (3, 90):
        x = torch.randn(m, 512, device=DEV).to(torch.bfloat16)
        y = mxfp4.forward(lin, x, bias)
        # the entry adds the bias to the bf16 output in bf16 (as the int4 entry does): the same here
        ref = reference_merged(x, parts, _act(m > 64)).to(torch.bfloat16) + bias.to(torch.bfloat16)
        assert y.dtype == torch.bfloat16 and rel(y, ref) <= TOL


@pytest.mark.parametrize("m", [5, 100])
def test_custom_op_replays_under_cuda_graph(lib, m):
    """torch.ops.radiance_hip.paroquant_mxfp4_linear: a CUDA-graph replay on new input equals eager
    (launches land on the capture stream, split-K scratch comes from torch's allocator)."""
    from radiance.kernels.hip import ops
    from radiance.testing.graphs import replayed_on_new_input

    ops.set_library(lib.path)
    parts, prep = _case(lib, 4, False)
    x = torch.randn(m, 896, device=DEV).to(torch.bfloat16)
    eager, y, again = replayed_on_new_input(
        lambda: torch.ops.radiance_hip.paroquant_mxfp4_linear(x, *ops.mxfp4_op_args(prep)), x,
        torch.randn(m, 896, device=DEV).to(torch.bfloat16))
    assert torch.equal(y, again) and not torch.equal(y, eager)
    assert rel(y, reference_merged(x, parts, _act(m > 64)).to(torch.bfloat16)) <= TOL
