"""`paroquant`: int4 asymmetric, group 128, learned pairwise Givens rotations (z-lab's format).

Per projection on disk (radiance.kernels.formats.paroquant): qweight [K, N/8] i32, qzeros
[K/128, N/8] i32, scales [K/128, N] f16, pairs [krot, K] i16, theta [krot, K/2] f16,
channel_scales [1, K] f16. vLLM merges q/k/v (3 partitions), gate/up (2), Qwen3.5's in_proj_qkvz
(4: in_proj_qkv fills q/k/v through one tuple shard id, in_proj_z the last): the N-packed tensors
concatenate along N through vLLM's loaders; rotations stay one per partition ([P, ...]) and
identical adjacent ones are merged at prepare time. The CPU path takes any number of distinct
rotations; a GPU GEMM at most its kernels' limit (3), which prepare checks, naming the layer.
"""

from __future__ import annotations

from typing import Any

from vllm.model_executor.layers.linear import register_weight_loader_v2_supported_method
from vllm.model_executor.layers.quantization import register_quantization_config

from radiance.kernels import methods, ops
from radiance.kernels.formats import FormatError, check_format_version
from radiance.kernels.formats import paroquant as fmt
from radiance.plugin import checkall
from radiance.plugin.base import RadianceLinearMethod, RadianceQuantConfig, config_int
from radiance.plugin.layout import GROUP, Layout
from radiance.plugin.params import check_rotation_limit, packed_param, partition_rotation, rotation_params, tensor_specs
from radiance.plugin.skip import checkpoint_skips

PACK = methods.get("paroquant").n_pack  # int4 codes per int32, along N


@register_weight_loader_v2_supported_method
class ParoQuantLinearMethod(RadianceLinearMethod):
    TENSORS = fmt.TENSORS
    PREPARED_FROM = ("qweight", "qzeros", "scales")

    def _create(self, layer, lay: Layout, weight_loader) -> None:
        for name, size in zip(lay.names, lay.sizes):
            if size % PACK:
                raise FormatError(
                    f"{name}: {size} output columns on this rank (tp={lay.tp_size}) is not a multiple of "
                    f"{PACK}, so the int4 packing cannot be split there; use a tensor-parallel size that "
                    "keeps each partition a multiple of 8 columns"
                )
        s, k, n, krot = tensor_specs("paroquant", self.config.krot), lay.k, sum(lay.sizes), self.config.krot
        params = {
            "qweight": packed_param(lay, s["qweight"], (k, n // PACK), 0, 1, 1, PACK, weight_loader),
            "qzeros": packed_param(lay, s["qzeros"], (k // GROUP, n // PACK), 0, 1, 1, PACK, weight_loader),
            "scales": packed_param(lay, s["scales"], (k // GROUP, n), 0, 1, None, 1, weight_loader),
            **rotation_params(lay, s, krot),
        }
        for name, p in params.items():
            layer.register_parameter(name, p)

    def _prepare(self, layer, lay: Layout) -> ops.PreparedLinear:
        qw, qz, sc = layer.qweight.data, layer.qzeros.data, layer.scales.data
        rotations = []
        for p, (n0, n1) in enumerate(lay.partition_bounds()):
            rot = partition_rotation(layer, p)
            part = fmt.ParoTensors(qw[:, n0 // PACK:n1 // PACK], qz[:, n0 // PACK:n1 // PACK], sc[:, n0:n1], rot.pairs, rot.theta, rot.channel_scales)
            fmt.validate(part, lay.names[p], self.config.bits, self.config.group_size)
            rotations.append(rot)
        check_rotation_limit(lay, "paroquant", rotations, qw.device)
        return ops.prepare("paroquant", {"qweight": qw, "qzeros": qz, "scales": sc}, rotations, lay.sizes,
                           config=self.config.kernels)

    def _exact(self, layer, lay, x, bias):
        return checkall.paroquant_exact(layer, lay, x, bias)


@register_quantization_config("paroquant")
class ParoQuantConfig(RadianceQuantConfig):
    """Also the base of the other rotated format (paroquant_mxfp4): METHOD, LINEAR and FORMAT differ."""

    METHOD = "paroquant"
    LINEAR = ParoQuantLinearMethod
    FORMAT = fmt  # its validate_config(where, bits, group_size)

    def __init__(self, bits: int, group_size: int, krot: int, modules_to_not_convert: list[str] | None = None):
        super().__init__(bits, group_size, modules_to_not_convert)
        self.krot = krot

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bits={self.bits}, group_size={self.group_size}, krot={self.krot})"

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> ParoQuantConfig:
        check_format_version(config, "config.json quantization_config")
        bits = config_int(config, "bits", cls.METHOD)
        group_size = config_int(config, "group_size", cls.METHOD)
        krot = config_int(config, "krot", cls.METHOD, default=fmt.MAX_KROT)
        cls.FORMAT.validate_config("config.json quantization_config", bits, group_size)
        if not 1 <= krot <= fmt.MAX_KROT:
            raise FormatError(
                f"config.json quantization_config: {cls.METHOD} krot must be between 1 and {fmt.MAX_KROT}, got {krot}"
            )
        return cls(bits, group_size, krot, checkpoint_skips(config, bits, group_size))
