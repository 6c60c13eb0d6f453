"""What `paroquant` and `pq2` share: the quant config skeleton and the linear method skeleton."""

from __future__ import annotations

import logging
import re
from typing import Any

import torch
from vllm.config import get_current_vllm_config_or_none
from vllm.model_executor.layers.linear import LinearBase, LinearMethodBase
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig

from radiance.kernels import ops
from radiance.kernels.config import KernelConfig
from radiance.kernels.formats import FormatError
from radiance.knobs import knob
from radiance.plugin import checkall, cpu_gemm, custom_op, producer_pass
from radiance.plugin.layout import Layout, layout_of
from radiance.plugin.params import require_loaded
from radiance.plugin.skip import SkinnyUnquantizedLinearMethod, is_skipped, skip_patterns

log = logging.getLogger("radiance.plugin")
_said: set[str] = set()


def info_once(msg: str, *args) -> None:
    """Log a per-layer decision once per layer kind (layer indices folded)."""
    key = re.sub(r"\.\d+\.", ".N.", msg % args)
    if key not in _said:
        _said.add(key)
        log.info(msg, *args)


def config_int(config: dict[str, Any], key: str, method: str, default: int | None = None) -> int:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FormatError(f"config.json quantization_config.{key}={value!r}: {method} needs an integer")
    return value


class RadianceQuantConfig(QuantizationConfig):
    METHOD = ""
    LINEAR: type = LinearMethodBase

    def __init__(self, bits: int, group_size: int, modules_to_not_convert: list[str] | None = None) -> None:
        super().__init__()
        self.bits = bits
        self.group_size = group_size
        self.modules_to_not_convert = list(modules_to_not_convert or [])
        self.skip = skip_patterns(self.modules_to_not_convert)
        self.kernels = KernelConfig.from_knobs()  # the kernels' knobs, resolved once for every layer (kernels/config.py)
        self.hf_prefixes: list[tuple[str, str]] = []  # (vLLM prefix, checkpoint prefix), see apply_vllm_mapper

    def __repr__(self) -> str:
        return f"{type(self).__name__}(bits={self.bits}, group_size={self.group_size})"

    @classmethod
    def get_name(cls) -> str:
        return cls.METHOD

    @classmethod
    def get_supported_act_dtypes(cls) -> list[torch.dtype]:
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_min_capability(cls) -> int:
        return 75

    @staticmethod
    def get_config_filenames() -> list[str]:
        return []  # config.json's quantization_config

    def apply_vllm_mapper(self, hf_to_vllm_mapper) -> None:
        """vLLM hands the model class's checkpoint -> vLLM renames: skip patterns (written against the
        checkpoint's module names) then also match a layer under the checkpoint's prefix."""
        self.hf_prefixes = [(new, old) for old, new in hf_to_vllm_mapper.orig_to_new_prefix.items() if new is not None]

    def get_quant_method(self, layer: torch.nn.Module, prefix: str):
        if not isinstance(layer, LinearBase):
            return None  # embeddings and lm_head stay 16-bit
        if is_skipped(prefix, self.packed_modules_mapping, self.skip, self.hf_prefixes):
            return SkinnyUnquantizedLinearMethod(prefix, self.kernels)
        _require_eager_for_checkall()
        producer_pass.install(get_current_vllm_config_or_none(), self.kernels.producers)
        return self.LINEAR(self, prefix)


def _require_eager_for_checkall() -> None:
    if not knob("RADIANCE_PQ_CHECKALL"):
        return
    checkall.gated_shapes()  # a malformed value fails the launch here, not at the first call
    cfg = get_current_vllm_config_or_none()
    if cfg is not None and cfg.model_config is not None and not cfg.model_config.enforce_eager:
        raise ValueError("RADIANCE_PQ_CHECKALL is an eval-mode check: serve with --enforce-eager or unset it")


def release(layer: torch.nn.Module, names: tuple[str, ...]) -> None:
    """Empty these parameters of `layer` (dtype and device kept): their storage is freed unless the
    prepared layer shares it, as pq2's CUDA path does with fp16 scales (its codes it re-lays)."""
    for name in names:
        param = getattr(layer, name)
        param.data = param.data.new_empty(0)


class RadianceLinearMethod(LinearMethodBase):
    """create_weights -> vLLM loads -> process_weights_after_loading (validate, prepare) -> apply."""

    TENSORS: tuple[str, ...] = ()
    # checkpoint tensors the prepared layer no longer reads: released after preparing (the kernels'
    # repacked copy would otherwise double the weights' memory), kept where CHECKALL gates the layer
    PREPARED_FROM: tuple[str, ...] = ()

    def __init__(self, config: RadianceQuantConfig, prefix: str) -> None:
        self.config = config
        self.prefix = prefix

    # subclasses: register the parameters / validate and prepare / the exact reference for CHECKALL
    def _create(self, layer: torch.nn.Module, lay: Layout, weight_loader) -> None:
        raise NotImplementedError

    def _prepare(self, layer: torch.nn.Module, lay: Layout) -> ops.PreparedLinear:
        raise NotImplementedError

    def _exact(self, layer, lay: Layout, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def create_weights(self, layer, input_size_per_partition, output_partition_sizes, input_size,
                       output_size, params_dtype, **extra_weight_attrs):
        weight_loader = extra_weight_attrs.pop("weight_loader")
        lay = layout_of(layer, self.prefix, input_size_per_partition, output_partition_sizes,
                        self.config.packed_modules_mapping, self.config.get_name())
        if lay.replicated:
            info_once(
                "%s: K per rank %d is not a multiple of 128 at tp=%d; serving it replicated "
                "(input all-gathered, rank 0 computes; exact)",
                self.prefix, input_size_per_partition, lay.tp_size,
            )
        layer._radiance_layout = lay
        self._create(layer, lay, weight_loader)
        custom_op.declare(layer, self.prefix, sum(lay.sizes), gather=lay.replicated, rank=lay.tp_rank)

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        lay: Layout = layer._radiance_layout
        require_loaded(lay, self.TENSORS)
        prep = self._prepare(layer, lay)
        path = cpu_gemm.use_vllm_gemm(layer, prep)
        if path is not None:
            info_once("%s on CPU: RADIANCE_CPU_WEIGHTS=%s, vLLM's %s GEMM in %s", self.config.get_name(),
                      prep.config.cpu_weights, path, str(layer.params_dtype).removeprefix("torch."))
        check = checkall.checker(layer, lay, self.config.get_name(), self._exact, prep.out_features, prep.in_features,
                                 self.config.kernels.producers)
        custom_op.attach(layer, prep, check)
        if check is None:
            release(layer, self.PREPARED_FROM)

    def apply(self, layer, x, bias=None):
        return custom_op.apply(layer, x, bias)
