"""The HIP sources built as CUDA (the WMMA emulated with the gfx12 wave32 fragment layout) against
kernels/reference.py on an NVIDIA GPU: codes/scales of pq_rotate_quant byte for byte, the GEMM within
2e-3 of the reference of the same activation quantization, odd M, merged linears, both bands.

PQ_HIP_TEST_LIB / PQ_HIP_TEST_LIB_WPERM0: prebuilt libraries (same sources, nvcc); else built here.
"""

from __future__ import annotations

import pytest
import torch

from radiance.kernels import reference
from radiance.kernels.hip import emulate
from radiance.kernels.hip import lib as pqlib
from radiance.kernels.hip.layout import prepare
from radiance.testing.paro_random import random_layer, rel

pytestmark = pytest.mark.gpu
DEV = "cuda"


def _layers(shapes, k, seed, krot=8):
    gen = torch.Generator().manual_seed(seed)
    return [random_layer(n, k, gen, krot=krot) for n in shapes]


def _to(t, dev=None):
    dev = dev or DEV
    return type(t)(*(getattr(t, f).to(dev) for f in ("qweight", "qzeros", "scales", "pairs", "theta", "channel_scales")))


def _ref(x, parts, act):
    """The reference of the same activation quantization, in x's dtype (bf16 rounds like the kernel's
    output; float32 is the exact value)."""
    return torch.cat([reference.paroquant_linear(x, t, act=act) for t in parts], dim=1)


@pytest.mark.parametrize("m", [1, 7, 33, 77])
@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_rotate_quant_bytewise(lib, m, per_token, dtype):
    t = _to(_layers([64], 640, 10, krot=7)[0])
    prep = prepare([t], wperm=lib.wperm)
    x = (torch.randn(m, 640, device=DEV) * 3).to(dtype)
    a, asr = pqlib.rotate_quant(lib, x, prep, per_token)
    a, asr = a.cpu(), asr.cpu()
    # rotate on the GPU (the same cos/sin as prepare), quantize on the CPU: torch on CUDA computes the
    # reference's `amax / 448.0` as amax * (1/448) (its scalar-divisor shortcut), an ulp off the
    # fp32 division the reference specifies and the kernel does
    xr = reference.rotate(x, t.pairs, t.theta, t.channel_scales).cpu()
    q, scale = reference.quant_fp8_e4m3_token(xr) if per_token else reference.quant_fp8_e4m3_group(xr)
    want = q.view(torch.uint8).clone()
    want[want == 0x80] = 0
    bad = int((a[0] != want).sum())
    assert bad == 0, f"{bad} of {want.numel()} codes differ"
    assert torch.equal(asr[0, :, :, 0], scale.expand(m, 5))
    # row sums: fp32 sums of the same codes in another order (exact unless a group spans > 2^17)
    torch.testing.assert_close(asr[0, :, :, 1], q.float().view(m, 5, 128).sum(-1), rtol=1e-6, atol=1e-3)


CASES = [  # (partition widths, K, krot)
    ([96], 256, 8),
    ([384], 1024, 8),
    ([512, 128, 128], 896, 8),  # qkv-like, three rotations
    ([4864, 4864], 896, 8),  # gate_up-like
    ([896], 4864, 8),  # down-like
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("m", [1, 5, 33, 64, 65, 200])
def test_linear_vs_reference_same_activation_quant(lib, case, m):
    shapes, k, krot = CASES[case]
    parts = [_to(t) for t in _layers(shapes, k, 100 + case, krot)]
    prep = prepare(parts, wperm=lib.wperm)
    x = torch.randn(m, k, device=DEV).to(torch.bfloat16)
    decode = m <= 64
    act = "fp8_group" if decode else "fp8_token"
    y = pqlib.linear(lib, x, prep)
    ref = _ref(x, parts, act)
    assert y.dtype == torch.bfloat16 and y.shape == ref.shape
    assert rel(y, ref) <= 2e-3
    # f16 out (finer rounding) against the exact fp32 reference, and against the torch model of the
    # kernels fed the kernel's own codes (separates a GEMM bug from a quantizer difference)
    a, asr = pqlib.rotate_quant(lib, x, prep, per_token=not decode)
    y16 = pqlib.gemm(lib, a, asr, prep, torch.float16, decode=decode)
    assert rel(y16, _ref(x.float(), parts, act)) <= 2e-3
    assert rel(y16, emulate.gemm(a, asr, prep)) <= 1e-3


@pytest.mark.parametrize("nsplit", [1, 2, 7])
def test_decode_split_k_is_the_same_sum(lib, nsplit):
    parts = [_to(t) for t in _layers([256, 128], 896, 7)]
    prep = prepare(parts, wperm=lib.wperm)
    x = torch.randn(9, 896, device=DEV).to(torch.float16)
    a, asr = pqlib.rotate_quant(lib, x, prep, per_token=False)
    y = pqlib.gemm(lib, a, asr, prep, torch.float16, decode=True, nsplit=nsplit)
    assert rel(y, _ref(x.float(), parts, "fp8_group")) <= 2e-3


def test_prefill_band_at_decode_sizes_and_per_group_scales(lib):
    """Band and scale granularity are independent: per-group codes through the prefill GEMM."""
    parts = [_to(t) for t in _layers([192], 512, 11)]
    prep = prepare(parts, wperm=lib.wperm)
    x = torch.randn(3, 512, device=DEV).to(torch.bfloat16)
    a, asr = pqlib.rotate_quant(lib, x, prep, per_token=False)
    y = pqlib.gemm(lib, a, asr, prep, torch.bfloat16, decode=False)
    assert rel(y, _ref(x, parts, "fp8_group")) <= 2e-3


@pytest.mark.parametrize("m", [5, 100])
def test_custom_op_replays_under_cuda_graph(lib, m):
    """torch.ops.radiance_hip.paroquant_linear: eager == CUDA-graph replay (launches land on the
    capture stream, split-K scratch comes from torch's allocator)."""
    from radiance.kernels.hip import ops
    from radiance.testing.graphs import replayed_on_new_input

    ops.set_library(lib.path)
    parts = [_to(t) for t in _layers([256, 256], 512, 12)]
    prep = prepare(parts, wperm=lib.wperm)
    x = torch.randn(m, 512, device=DEV).to(torch.bfloat16)
    eager, y, again = replayed_on_new_input(lambda: torch.ops.radiance_hip.paroquant_linear(x, *ops.op_args(prep)), x,
                                            torch.randn(m, 512, device=DEV).to(torch.bfloat16))
    assert torch.equal(y, again) and not torch.equal(y, eager)
    assert rel(y, _ref(x, parts, "fp8_group" if m <= 64 else "fp8_token")) <= 2e-3
