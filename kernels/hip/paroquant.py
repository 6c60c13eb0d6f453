"""The ("paroquant", "rocm") entry of kernels/methods/paroquant.py: `prepare(prep, t)` once per
layer, `forward(prep, x, bias)` per call, `produced(prep, producer, bias)` for a fused producer.

`prepare` lays the merged int4 weight out for pq_gemm.hip (layout.prepare_merged) with the layer's
distinct rotations and their runs (kernels/linear.py; RADIANCE_PQ_WPERM must match the built
library) and plans its rows (kernels/hip/kernels.py). `forward` is one custom op: pq_rotate_quant
(per-group scales in the decode band, per-token above) + the GEMM. `produced`: the producer computed
inside the rotate+quant kernel (pq_produce), then the GEMM.
"""

from __future__ import annotations

import torch

from radiance.kernels import registry
from radiance.kernels.formats.paroquant import ParoTensors
from radiance.kernels.hip import kernels, layout
from radiance.kernels.hip import lib as hip_lib
from radiance.kernels.hip import ops as hip_ops  # registers the custom ops (torch.ops.radiance_hip)
from radiance.kernels.linear import PreparedLinear
from radiance.kernels.producers import Producer

KEY = "hip"  # prep.data's entry


def plan(prep: PreparedLinear, specs: list[registry.KernelSpec]) -> registry.Plan:
    """The layer's rows on the decode / prefill kernels (and where the HIP library is loaded from)."""
    hip_ops.use_kernel_dir(prep.config.kernel_dir)
    return registry.choose(specs, registry.Target.of(prep.method, "rocm", prep.out_features, prep.in_features,
                                                     prep.config))


def prepare(prep: PreparedLinear, t: ParoTensors) -> None:
    """`t` holds the merged qweight / qzeros / scales (the rotation fields are partition 0's: the
    distinct rotations come from prep.rotations)."""
    rows = kernels.decode_rows(plan(prep, kernels.PAROQUANT))
    prep.data[KEY] = layout.prepare_merged(  # type: ignore[assignment]
        t.qweight, t.qzeros, t.scales, prep.rotations, prep.runs, wperm=prep.config.wperm)
    prep.data[KEY].decode_rows = rows


def forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    y = torch.ops.radiance_hip.paroquant_linear(x, *hip_ops.op_args(prep.data[KEY]))  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


def produced(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    return produced_by(KEY, prep, producer, bias)


def produced_by(key: str, prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    """The producer computed inside the HIP rotate+quant kernel (pq_produce), then the layer's GEMM
    (prep.data[key]: the int4 or the MXFP4 layout)."""
    return hip_lib.produced_linear(hip_ops.library(), producer, prep.data[key],  # type: ignore[arg-type]
                                   None if bias is None else bias.to(producer.dtype))
