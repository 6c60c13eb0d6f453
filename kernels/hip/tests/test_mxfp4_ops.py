"""The ("paroquant_mxfp4", "rocm") entry (kernels/hip/mxfp4.py) and its custom ops without a GPU:
prepare from the plugin's PreparedLinear (merged tensors, distinct rotations, runs) reproduces the
reference through the emulation (1e-5: fp32 summation order only), the ops trace under fake tensors,
and the Python guards refuse what the kernels cannot take before any launch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.hip import emulate, mxfp4, mxfp4_emulate
from radiance.kernels.hip import lib as pqlib
from radiance.kernels.hip import ops as hip_ops
from radiance.kernels.hip.mxfp4_layout import prepare
from radiance.kernels.linear import PreparedLinear, Rotation, dedup_rotations
from radiance.testing.mxfp4_random import random_layer, reference_merged
from radiance.testing.paro_random import rel


def _parts(widths, k, seed):
    gen = torch.Generator().manual_seed(seed)
    return [random_layer(n, k, gen, krot=4) for n in widths]


def _linear(parts: list[Mxfp4Tensors]) -> tuple[PreparedLinear, Mxfp4Tensors]:
    """What kernels/ops.py's prepare_paroquant_mxfp4 hands a platform: the merged tensors, the
    distinct rotations and their runs."""
    distinct, runs = dedup_rotations([Rotation.of(t) for t in parts], [t.out_features for t in parts])
    w, s = torch.cat([t.weight for t in parts]), torch.cat([t.weight_scale for t in parts])
    prep = PreparedLinear("paroquant_mxfp4", "rocm", parts[0].in_features, int(w.shape[0]), rotations=distinct, runs=runs)
    r = distinct[0]
    return prep, Mxfp4Tensors(w, s, r.pairs, r.theta, r.channel_scales)


def test_platform_prepare_merges_runs_like_the_plugin():
    q, k_, v = _parts([128, 64, 64], 256, 0)
    v.pairs, v.theta, v.channel_scales = k_.pairs, k_.theta, k_.channel_scales
    lin, t = _linear([q, k_, v])
    mxfp4.prepare(lin, t)
    prep = lin.data[mxfp4.KEY]
    assert prep.rotations == 2 and (prep.pb1, prep.pb2) == (128, 1 << 30) and prep.out_features == 256
    x = torch.randn(4, 256, generator=torch.Generator().manual_seed(1))
    for per_token in (False, True):
        a, asr = emulate.rotate_quant(x, prep, per_token)
        y = mxfp4_emulate.gemm(a, asr, prep, per_token=per_token)
        assert rel(y, reference_merged(x, [q, k_, v], "fp8_token" if per_token else "fp8_group")) < 1e-5


def test_platform_prepare_refuses_an_unaligned_boundary():
    lin, t = _linear(_parts([48, 32], 128, 2))
    with pytest.raises(ValueError, match="boundary 48 must be a multiple of 32"):
        mxfp4.prepare(lin, t)


def test_ops_and_forward_have_shapes_under_fake_tensors():
    lin, t = _linear(_parts([64, 32], 256, 3))
    mxfp4.prepare(lin, t)
    prep = lin.data[mxfp4.KEY]
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(3, 5, 256, dtype=torch.bfloat16)
        y = torch.ops.radiance_hip.paroquant_mxfp4_linear(x, *hip_ops.mxfp4_op_args(prep))
        assert y.shape == (3, 5, 96) and y.dtype == torch.bfloat16
        y2 = mxfp4.forward(lin, x[0], torch.empty(96, dtype=torch.float32))
        assert y2.shape == (5, 96) and y2.dtype == torch.bfloat16
        a, asr = torch.ops.radiance_hip.pq_rotate_quant(x[0], prep.cs, prep.rec, prep.krot, True)
        out = torch.ops.radiance_hip.pq_mxfp4_fp8_gemm(a, asr, prep.wq, prep.ex, prep.rsc, 96, prep.pb1, prep.pb2,
                                                       True, prep.per_block, torch.float16, False, True)
        assert out.shape == (5, 96) and out.dtype == torch.float16


def test_gemm_guards_refuse_before_launching():
    lib = pqlib.PqLib(path=Path("stub.so"), dll=None, wperm=True)  # type: ignore[arg-type] -- never called
    prep = prepare(_parts([64, 64], 256, 4))
    a = torch.zeros(1, 3, 256, dtype=torch.uint8)  # one rotated copy; the layer has two
    asr = torch.zeros(1, 3, 2, 2)
    with pytest.raises(ValueError, match="rotations, rows, K"):
        pqlib.mxfp4_gemm(lib, a, asr, prep, torch.bfloat16, decode=True)
    a, asr = torch.zeros(2, 65, 256, dtype=torch.uint8), torch.zeros(2, 65, 2, 2)
    with pytest.raises(ValueError, match="M <= 64"):
        pqlib.mxfp4_gemm(lib, a, asr, prep, torch.bfloat16, decode=True)
    with pytest.raises(ValueError, match="out_dtype"):
        pqlib.mxfp4_gemm(lib, a, asr, prep, torch.float32, decode=False)
    wperm0 = pqlib.PqLib(path=Path("stub.so"), dll=None, wperm=False)  # type: ignore[arg-type]
    with pytest.raises(pqlib.KernelError, match="PQ_WPERM"):
        pqlib.mxfp4_gemm(wperm0, a, asr, prep, torch.bfloat16, decode=False)
