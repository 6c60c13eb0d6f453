"""The ("paroquant_mxfp4", "rocm") entry of kernels/methods/paroquant_mxfp4.py: `prepare(prep, t)`
once per layer, `forward(prep, x, bias)` per call, `produced` for a fused producer: the contract of
the int4 entry (kernels/hip/paroquant.py).

`prepare` lays the merged weight out for pq_mxfp4_gemm.hip (mxfp4_layout.prepare_merged: the fold, or
the per-block kernels where a layer leaves the fold's window) with the layer's distinct rotations
and their runs (kernels/linear.py; the column select checked by layout.rotation_layout). `forward` is one
custom op: pq_rotate_quant (per-group scales in the decode band, per-token above) + the GEMM.
"""

from __future__ import annotations

import torch

from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.hip import kernels, mxfp4_layout
from radiance.kernels.hip import ops as hip_ops
from radiance.kernels.hip.paroquant import plan, produced_by
from radiance.kernels.linear import PreparedLinear
from radiance.kernels.producers import Producer

KEY = "hip_mxfp4"  # prep.data's entry


def prepare(prep: PreparedLinear, t: Mxfp4Tensors) -> None:
    """`t` holds the merged weight / weight_scale (the rotation fields are partition 0's: the
    distinct rotations come from prep.rotations). RADIANCE_PQ_WPERM must match the built library."""
    rows = kernels.decode_rows(plan(prep, kernels.MXFP4))
    prep.data[KEY] = mxfp4_layout.prepare_merged(  # type: ignore[assignment]
        t.weight, t.weight_scale, prep.rotations, prep.runs, wperm=prep.config.wperm)
    prep.data[KEY].decode_rows = rows


def forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    args = hip_ops.mxfp4_op_args(prep.data[KEY])  # type: ignore[arg-type]
    y = torch.ops.radiance_hip.paroquant_mxfp4_linear(x, *args)
    return y if bias is None else y + bias.to(y.dtype)


def produced(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    return produced_by(KEY, prep, producer, bias)
