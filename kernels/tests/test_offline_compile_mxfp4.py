"""The paroquant_mxfp4 kernels (kernels/mxfp4_ops.py) compiled for the users' cards (sm_75 RTX 2060,
sm_86 RTX 3090) and the lent H200 (sm_90) with the Triton installed here -- no GPU needed: the real
ops run on CPU tensors under radiance.testing.offline_compile.compile_only and launch nothing, and
test_offline_compile's checks apply (every expected kernel built, shared memory within the card's
per-block limit, no registers spilled to local memory).

Kept to ~35 builds (< 60 s with a cold Triton cache): one merged real-width layer (qkv_P3: three
rotated copies, K = 5120) at an M in each band the table tells apart (M = 1 and 3: 16 x 32 split-K,
M == 1 being its own specialization; 16; 32; 64; 300: sm_90's mid band; 600: the prefill tile), a
narrower one at 300 (sm_90's 128 x 256), a bias and the per-block e8m0 scaling at both ends, a K = 256
layer for the unsplit decode program, and W4A8 (fp8) on sm_90. The tile shapes, not N, decide
registers and shared memory; the numerics are test_mxfp4_triton's.
"""

from __future__ import annotations

import pytest
import torch

from radiance.kernels.tests.test_offline_compile import KNOBS, _check, _dtype

pytestmark = pytest.mark.integration  # tens of seconds: ~12 kernel builds per card when Triton's cache is cold

EXPECT = {"sm_75": {"_rotate_kernel", "_mxfp4_kernel"}, "sm_86": {"_rotate_kernel", "_mxfp4_kernel"},
          "sm_90": {"_rotate_kernel", "_mxfp4_kernel", "_quant_fp8_kernel"}}


@pytest.fixture(autouse=True)
def _plain_knobs(monkeypatch):
    pytest.importorskip("triton.backends.nvidia")
    for k in KNOBS:
        monkeypatch.delenv(k, raising=False)


def _layer(sizes, k, **kw):
    """Zero codes, e8m0 2^-7 and identity rotations (one Givens layer): only shapes and formats
    matter, nothing runs."""
    from radiance.kernels import mxfp4_ops
    from radiance.kernels.linear import Rotation
    from radiance.testing.paro_random import runs_of

    n = sum(sizes)
    rot = Rotation(torch.arange(128, dtype=torch.int16).repeat(1, k // 128), torch.zeros(1, k // 2, dtype=torch.float16),
                   torch.ones(1, k, dtype=torch.float16))
    return mxfp4_ops.prepare(torch.zeros(n, k // 2, dtype=torch.uint8), torch.full((n, k // 32), 120, dtype=torch.uint8),
                             [rot] * len(sizes), runs_of(sizes), **kw)


@pytest.mark.parametrize("arch", ["sm_75", "sm_86", "sm_90"])
def test_mxfp4_kernels_compile_for(arch):
    from radiance.kernels import mxfp4_ops
    from radiance.testing.offline_compile import compile_only

    dt = _dtype(arch)
    with compile_only(arch) as built:
        layer = _layer([12288, 1024, 1024], 5120)
        assert layer.bounds == (12288, 13312)
        for m in (1, 3, 16, 32, 64, 300, 600):
            mxfp4_ops.forward(layer, torch.randn(m, 5120, dtype=dt))
        narrow = _layer([5120], 6144)  # sm_90's mid band on layers below WIDE_N: 128 x 256
        mxfp4_ops.forward(narrow, torch.randn(300, 6144, dtype=dt))
        bias = torch.zeros(layer.n, dtype=dt)
        blk = _layer([12288, 1024, 1024], 5120, per_block=True)
        for m in (1, 300):
            mxfp4_ops.forward(layer, torch.randn(m, 5120, dtype=dt), bias=bias)
            mxfp4_ops.forward(blk, torch.randn(m, 5120, dtype=dt))
        small = _layer([1024], 256)
        assert mxfp4_ops.tile_for(small, 1).split == 1
        mxfp4_ops.forward(small, torch.randn(1, 256, dtype=dt))
        if arch == "sm_90":  # fp8 dots: sm_89+
            fp8 = _layer([12288, 1024, 1024], 5120, fp8=True)
            for m in (1, 300):
                mxfp4_ops.forward(fp8, torch.randn(m, 5120, dtype=dt))
    for b in built:
        print(arch, b)
    _check(built, arch, EXPECT[arch])
