"""`paroquant_mxfp4` (MXFP4-PARO): paroquant's rotations, the weight on an OCP MXFP4 grid.

Per projection on disk (radiance.kernels.formats.paroquant_mxfp4): weight [N, K/2] u8 (two e2m1
per byte along K), weight_scale [N, K/32] u8 (e8m0), and paroquant's pairs / theta /
channel_scales. Both weight tensors split along N (dim 0) for column-parallel layers and along K
(dim 1) for row-parallel ones through vLLM's own parameter classes; rotations as paroquant's.
Served by the CPU paths (kernels/ops.py); a GPU has no kernel for it yet, which the load says.
"""

from __future__ import annotations

from vllm.model_executor.layers.linear import register_weight_loader_v2_supported_method
from vllm.model_executor.layers.quantization import register_quantization_config

from radiance.kernels import ops
from radiance.kernels.formats import paroquant_mxfp4 as fmt
from radiance.plugin import checkall
from radiance.plugin.base import RadianceLinearMethod
from radiance.plugin.layout import Layout
from radiance.plugin.params import check_rotation_limit, packed_param, partition_rotation, rotation_params, tensor_specs
from radiance.plugin.paroquant import ParoQuantConfig

PACK = 2  # e2m1 codes per byte


@register_weight_loader_v2_supported_method
class ParoQuantMxfp4LinearMethod(RadianceLinearMethod):
    TENSORS = fmt.TENSORS
    PREPARED_FROM = ("weight", "weight_scale")

    def _create(self, layer, lay: Layout, weight_loader) -> None:
        s, k, n, krot = tensor_specs("paroquant_mxfp4", self.config.krot), lay.k, sum(lay.sizes), self.config.krot
        params = {
            "weight": packed_param(lay, s["weight"], (n, k // PACK), 1, 0, 1, PACK, weight_loader),
            "weight_scale": packed_param(lay, s["weight_scale"], (n, k // fmt.BLOCK), 1, 0, None, 1, weight_loader),
            **rotation_params(lay, s, krot),
        }
        for name, p in params.items():
            layer.register_parameter(name, p)

    def _prepare(self, layer, lay: Layout) -> ops.PreparedLinear:
        w, sc = layer.weight.data, layer.weight_scale.data
        rotations = []
        for p, (n0, n1) in enumerate(lay.partition_bounds()):
            rot = partition_rotation(layer, p)
            fmt.validate(fmt.Mxfp4Tensors(w[n0:n1], sc[n0:n1], rot.pairs, rot.theta, rot.channel_scales), lay.names[p], self.config.bits,
                         self.config.group_size)
            rotations.append(rot)
        check_rotation_limit(lay, "paroquant_mxfp4", rotations, w.device)
        return ops.prepare("paroquant_mxfp4", {"weight": w, "weight_scale": sc}, rotations, lay.sizes,
                           config=self.config.kernels)

    def _exact(self, layer, lay, x, bias):
        return checkall.paroquant_mxfp4_exact(layer, lay, x, bias)


@register_quantization_config("paroquant_mxfp4")
class ParoQuantMxfp4Config(ParoQuantConfig):
    METHOD = "paroquant_mxfp4"
    LINEAR = ParoQuantMxfp4LinearMethod
    FORMAT = fmt
