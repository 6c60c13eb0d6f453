"""The custom ops register and trace (fake tensors) without a GPU; loading errors are clear."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from radiance.kernels.hip import lib as pqlib
from radiance.kernels.hip import ops
from radiance.kernels.hip.layout import prepare
from radiance.testing.paro_random import random_layer


def test_ops_have_shapes_under_fake_tensors():
    prep = prepare([random_layer(64, 256, torch.Generator().manual_seed(0)), random_layer(32, 256, torch.Generator().manual_seed(1))])
    with FakeTensorMode(allow_non_fake_inputs=True):
        x = torch.empty(3, 5, 256, dtype=torch.bfloat16)
        y = torch.ops.radiance_hip.paroquant_linear(x, *ops.op_args(prep))
        assert y.shape == (3, 5, 96) and y.dtype == torch.bfloat16
        a, asr = torch.ops.radiance_hip.pq_rotate_quant(x[0], prep.cs, prep.rec, prep.krot, False)
        assert a.shape == (2, 5, 256) and a.dtype == torch.uint8 and asr.shape == (2, 5, 2, 2)
        out = torch.ops.radiance_hip.pq_int4_fp8_gemm(a, asr, prep.wq, prep.sz, 96, prep.pb1, prep.pb2, True,
                                                      torch.float16, True)
        assert out.shape == (5, 96) and out.dtype == torch.float16


def test_missing_library_is_a_clear_error(tmp_path, monkeypatch):
    with pytest.raises(pqlib.KernelError, match="cannot load HIP kernel library"):
        pqlib.load(tmp_path / "nope.so")
    monkeypatch.setattr(ops, "_DIR", None)  # no layer prepared with a RADIANCE_KERNEL_DIR
    monkeypatch.setattr(ops, "_LIB", None)
    with pytest.raises(pqlib.KernelError, match="set_library"):
        ops.library()
