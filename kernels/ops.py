"""Per-layer ops the vLLM plugin calls: prepare once after loading, then `linear_forward` per call.

`prepare_paroquant` / `prepare_paroquant_mxfp4` / `prepare_pq2` / `prepare_dense` build a
`PreparedLinear` (kernels/linear.py) and hand it to its platform's module, which lays the weights
out and plans the kernel per row count from that method's registry (kernels/registry.py; NVIDIA:
paro_table.KERNELS, mxfp4_ops.KERNELS, pq2_table.KERNELS, pq2_table.DENSE_KERNELS). `linear_forward(prep, x, bias)`
then calls the platform's forward. A (method, platform) pair with no module is an error naming it
(no silent fallback). On CPU every method computes exactly what `radiance.kernels.reference`
computes or (the default, folded) the same up to rounding: kernels/cpu_ops.py.

No vLLM import here: `radiance.kernels` must run without vLLM.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from radiance.kernels.cpu_ops import CPU
from radiance.kernels.formats.paroquant import ParoTensors
from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.formats.pq2 import Pq2Tensors
from radiance.kernels.hip import mxfp4 as hip_mxfp4
from radiance.kernels.producers import Producer, check_inputs
from radiance.kernels.linear import (  # noqa: F401 -- re-exported: callers say ops.PreparedLinear
    KernelFn, PreparedLinear, Rotation, Run, check_partitions, dedup_rotations, platform_of, rotate_all)
from radiance.knobs import knob

METHODS = ("paroquant", "paroquant_mxfp4", "pq2", "dense")


def linear_forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y [M, N] = the layer applied to x [M, K] (plus bias), by the kernels planned at prepare."""
    if x.dim() != 2 or x.shape[1] != prep.in_features:
        raise ValueError(f"radiance: expected input [M, {prep.in_features}], got {list(x.shape)}")
    return prep.forward(prep, x, bias)  # type: ignore[misc]


def produced_forward(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = the layer applied to the output of the op before it (kernels/producers.py), that op
    fused into the layer's prologue where the platform has a producer for the method (PRODUCED)."""
    ok, why = can_produce(prep)
    if not ok:
        raise NotImplementedError(f"radiance: {why}")
    check_inputs(producer, prep.in_features)
    return PRODUCED[prep.platform][prep.method](prep, producer, bias)


def can_produce(prep: PreparedLinear) -> tuple[bool, str]:
    """Whether produced_forward takes this layer, and why not."""
    if prep.method not in PRODUCED.get(prep.platform, {}):
        return False, (f"no fused producer for method={prep.method} on platform={prep.platform} "
                       f"(radiance.kernels.ops.PRODUCED has {sorted(PRODUCED.get(prep.platform, {}))})")
    return True, ""


# ----------------------------------------------------------------------------- prepare (once per layer)
def prepare_paroquant(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
    rotations: list[Rotation], partition_sizes: list[int], platform: str | None = None,
) -> PreparedLinear:
    """qweight/qzeros/scales concatenated along N over the partitions; one Rotation and one size
    (vLLM's output partition sizes) per partition. Identical adjacent rotations are merged. `platform`: the
    tensors' device's unless given (the offline compile check prepares CPU tensors for a GPU)."""
    prep = _rotated("paroquant", int(scales.shape[1]), int(qweight.shape[0]), qweight.device, rotations,
                    partition_sizes, platform)
    return _prepare(prep, ParoTensors(qweight, qzeros, scales, *_first(prep)))


def prepare_paroquant_mxfp4(
    weight: torch.Tensor, weight_scale: torch.Tensor,
    rotations: list[Rotation], partition_sizes: list[int], platform: str | None = None,
) -> PreparedLinear:
    """weight [N, K/2] / weight_scale [N, K/32] concatenated along N over the partitions; rotations as
    prepare_paroquant's."""
    prep = _rotated("paroquant_mxfp4", int(weight.shape[0]), int(weight.shape[1]) * 2, weight.device,
                    rotations, partition_sizes, platform)
    return _prepare(prep, Mxfp4Tensors(weight, weight_scale, *_first(prep)))


def prepare_pq2(qweight: torch.Tensor, scales: torch.Tensor, platform: str | None = None) -> PreparedLinear:
    n, k = int(qweight.shape[0]), int(qweight.shape[1]) * 4
    prep = PreparedLinear("pq2", platform or platform_of(qweight.device), k, n, runs=[Run(0, n, -1)])
    return _prepare(prep, Pq2Tensors(qweight, scales))


def prepare_dense(weight: torch.Tensor, platform: str | None = None) -> PreparedLinear:
    """An unquantized (skipped) linear; GPU plans may route skinny calls to a split-K kernel."""
    n, k = (int(s) for s in weight.shape)
    prep = PreparedLinear("dense", platform or platform_of(weight.device), k, n, runs=[Run(0, n, -1)])
    return _prepare(prep, weight)


def _rotated(method: str, n: int, k: int, device: torch.device, rotations: list[Rotation],
             partition_sizes: list[int], platform: str | None) -> PreparedLinear:
    """A rotated method's PreparedLinear with its distinct rotations and runs."""
    distinct, runs = dedup_rotations(rotations, partition_sizes)
    return PreparedLinear(method, platform or platform_of(device), k, n, rotations=distinct, runs=runs)


def _first(prep: PreparedLinear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    r = prep.rotations[0]
    return r.pairs, r.theta, r.channel_scales


def _prepare(prep: PreparedLinear, tensors) -> PreparedLinear:
    pair = PLATFORMS.get(prep.platform, {}).get(prep.method)
    if pair is None:
        raise NotImplementedError(
            f"radiance: no kernels for method={prep.method} on platform={prep.platform} "
            f"(radiance.kernels.ops.PLATFORMS has {sorted(PLATFORMS.get(prep.platform, {}))}); "
            "serve this method on a platform that has them")
    prepare, prep.forward = pair
    prepare(prep, tensors)
    return prep


# ----------------------------------------------------------------------------- NVIDIA (Triton / Gluon)
def _paroquant_cuda_prepare(prep: PreparedLinear, t: ParoTensors) -> None:
    # paro_ops owns the layout, the kernel plan (paro_table.KERNELS), tiles and scratch
    from radiance.kernels import paro_ops

    prep.data["paro"] = paro_ops.prepare([t.qweight], [t.qzeros], [t.scales], prep.rotations,  # type: ignore[assignment]
                                         prep.runs)


def _paroquant_cuda(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import paro_ops

    return paro_ops.forward(prep.data["paro"], x, bias=bias)  # type: ignore[arg-type]


def _pq2_cuda_prepare(prep: PreparedLinear, t: Pq2Tensors) -> None:
    # pq2_ops owns the layout, the kernel plan (pq2_table.KERNELS) and the launch plans
    from radiance.kernels import pq2_ops

    prep.data["pq2"] = pq2_ops.prepare(t.qweight, t.scales)  # type: ignore[assignment]


def _pq2_cuda(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import pq2_ops

    y = pq2_ops.forward(prep.data["pq2"], x)  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


def _mxfp4_cuda_prepare(prep: PreparedLinear, t: Mxfp4Tensors) -> None:
    # mxfp4_ops owns the layout, the kernel plan (mxfp4_ops.KERNELS), tiles and scratch
    from radiance.kernels import mxfp4_ops

    prep.data["mxfp4"] = mxfp4_ops.prepare(t.weight, t.weight_scale, prep.rotations, prep.runs)  # type: ignore[assignment]


def _mxfp4_cuda(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import mxfp4_ops

    return mxfp4_ops.forward(prep.data["mxfp4"], x, bias=bias)  # type: ignore[arg-type]


def _dense_cuda_prepare(prep: PreparedLinear, weight: torch.Tensor) -> None:
    from radiance.kernels import pq2_ops

    prep.data["w"] = weight.contiguous()
    prep.data["kernels"] = pq2_ops.dense_plan(weight)  # type: ignore[assignment]


def _dense_cuda(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import pq2_ops

    return pq2_ops.dense_linear(x, prep.data["w"], prep.data["kernels"], bias)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- AMD gfx1201 (HIP)
def _paroquant_rocm_prepare(prep: PreparedLinear, t: ParoTensors) -> None:
    # kernels/hip/layout.py owns the layout (RADIANCE_PQ_WPERM must match the built library)
    from radiance.kernels.hip import layout

    prep.data["hip"] = layout.prepare_merged(  # type: ignore[assignment]
        t.qweight, t.qzeros, t.scales, prep.rotations, prep.runs, wperm=knob("RADIANCE_PQ_WPERM") == "1")


def _paroquant_rocm(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # one custom op: rotate+quant (per-group scales in the decode band, per-token above) + the GEMM
    from radiance.kernels.hip import ops as hip_ops

    y = torch.ops.radiance_hip.paroquant_linear(x, *hip_ops.op_args(prep.data["hip"]))  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


def _dense_rocm_prepare(prep: PreparedLinear, weight: torch.Tensor) -> None:
    prep.data["w"] = weight.contiguous()


def _dense_rocm(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # no skinny HIP kernel yet: the platform BLAS, as vLLM's own unquantized method would run it
    return torch.nn.functional.linear(x, prep.data["w"], bias)


# platform -> method -> (prepare(prep, tensors), forward(prep, x, bias)); the kernel choice inside a
# platform is its registry's, planned by the prepare
PLATFORMS: dict[str, dict[str, tuple[Callable, KernelFn]]] = {
    "cpu": CPU,
    "cuda": {"paroquant": (_paroquant_cuda_prepare, _paroquant_cuda), "pq2": (_pq2_cuda_prepare, _pq2_cuda),
             "paroquant_mxfp4": (_mxfp4_cuda_prepare, _mxfp4_cuda), "dense": (_dense_cuda_prepare, _dense_cuda)},
    "rocm": {"paroquant": (_paroquant_rocm_prepare, _paroquant_rocm),
             "paroquant_mxfp4": (hip_mxfp4.prepare, hip_mxfp4.forward), "dense": (_dense_rocm_prepare, _dense_rocm)},
}


def _unfused(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    # the producer's own ops (reference.py), then the layer: the CPU keeps the exact unfused path
    return linear_forward(prep, producer.plain(), bias)


def _paroquant_cuda_produced(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import paro_ops

    return paro_ops.forward_produced(prep.data["paro"], producer, bias=bias)  # type: ignore[arg-type]


def _mxfp4_cuda_produced(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import mxfp4_ops

    return mxfp4_ops.forward_produced(prep.data["mxfp4"], producer, bias=bias)  # type: ignore[arg-type]


def _pq2_cuda_produced(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import pq2_ops

    y = pq2_ops.forward_produced(prep.data["pq2"], producer)  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


def _rocm_produced(key: str) -> Callable:
    # the producer computed inside the HIP rotate+quant kernel (pq_produce), then the layer's GEMM
    def run(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
        from radiance.kernels.hip import lib as hip_lib, ops as hip_ops

        return hip_lib.produced_linear(hip_ops.library(), producer, prep.data[key],  # type: ignore[arg-type]
                                       None if bias is None else bias.to(producer.dtype))
    return run


# platform -> method -> produced_forward(prep, producer, bias): the fused producers (into the rotation
# prologue, or pq2's activation quantizer); the plugin's graph pass fuses only the layers listed here
PRODUCED: dict[str, dict[str, Callable]] = {
    "cpu": {"paroquant": _unfused, "paroquant_mxfp4": _unfused, "pq2": _unfused},
    "cuda": {"paroquant": _paroquant_cuda_produced, "paroquant_mxfp4": _mxfp4_cuda_produced, "pq2": _pq2_cuda_produced},
    "rocm": {"paroquant": _rocm_produced("hip"), "paroquant_mxfp4": _rocm_produced(hip_mxfp4.KEY)},
}
