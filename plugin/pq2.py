"""`pq2`: ternary weights (codes 0/1/2 = -1/0/+1, four per byte), one fp16 scale per 128 weights.

Per projection on disk (radiance.kernels.formats.pq2): qweight [N, K/4] u8, scales [N, K/128] f16.
Both split along N (dim 0) for column-parallel layers and along K (dim 1) for row-parallel ones,
through vLLM's own parameter classes.
"""

from __future__ import annotations

from typing import Any

from vllm.model_executor.layers.linear import register_weight_loader_v2_supported_method
from vllm.model_executor.layers.quantization import register_quantization_config

from radiance.kernels import ops
from radiance.kernels.formats import check_format_version
from radiance.kernels.formats import pq2 as fmt
from radiance.plugin import checkall
from radiance.plugin.base import RadianceLinearMethod, RadianceQuantConfig, config_int
from radiance.plugin.layout import GROUP, Layout
from radiance.plugin.params import packed_param, tensor_specs
from radiance.plugin.skip import checkpoint_skips

PACK = 4  # ternary codes per byte
SPECS = tensor_specs("pq2")


@register_weight_loader_v2_supported_method
class Pq2LinearMethod(RadianceLinearMethod):
    TENSORS = fmt.TENSORS
    PREPARED_FROM = ("qweight", "scales")

    def _create(self, layer, lay: Layout, weight_loader) -> None:
        k, n = lay.k, sum(lay.sizes)
        layer.register_parameter(
            "qweight", packed_param(lay, SPECS["qweight"], (n, k // PACK), 1, 0, 1, PACK, weight_loader))
        layer.register_parameter(
            "scales", packed_param(lay, SPECS["scales"], (n, k // GROUP), 1, 0, None, 1, weight_loader))

    def _prepare(self, layer, lay: Layout) -> ops.PreparedLinear:
        qw, sc = layer.qweight.data, layer.scales.data
        for name, (n0, n1) in zip(lay.names, lay.partition_bounds()):
            fmt.validate(fmt.Pq2Tensors(qw[n0:n1], sc[n0:n1]), name, self.config.bits, self.config.group_size)
        return ops.prepare("pq2", {"qweight": qw, "scales": sc}, config=self.config.kernels)

    def _exact(self, layer, lay, x, bias):
        return checkall.pq2_exact(layer, lay, x, bias)


@register_quantization_config("pq2")
class Pq2Config(RadianceQuantConfig):
    METHOD = "pq2"
    LINEAR = Pq2LinearMethod

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> Pq2Config:
        check_format_version(config, "config.json quantization_config")
        bits = config_int(config, "bits", "pq2")
        group_size = config_int(config, "group_size", "pq2")
        fmt.validate_config("config.json quantization_config", bits, group_size)
        return cls(bits, group_size, checkpoint_skips(config, bits, group_size))
