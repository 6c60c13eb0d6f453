"""Modules left unquantized, and the skinny unquantized linear method that serves them."""

from __future__ import annotations

import re

import torch
from vllm.model_executor.layers.linear import UnquantizedLinearMethod, register_weight_loader_v2_supported_method

from radiance.kernels import ops
from radiance.kernels.config import KernelConfig
from radiance.kernels.formats import FormatError
from radiance.knobs import knob
from radiance.plugin import cpu_gemm, custom_op

# What z-lab's ParoQuant checkpoints leave in 16 bit (vision tower, the gated-delta-net's b/a gate
# projections: Qwen3.5's in_proj_b / in_proj_a, merged by vLLM into in_proj_ba, Qwen3-Next's fused in_proj_ba).
DEFAULT_SKIP = (r".*visual.*", r".*in_proj_a.*", r".*in_proj_b.*")


def skip_patterns(checkpoint_list: list[str] | None) -> list[re.Pattern]:
    """Built-in list + the checkpoint's `modules_to_not_convert` + RADIANCE_PQ_SKIP (regexes, re.search)."""
    raw = list(DEFAULT_SKIP) + list(checkpoint_list or [])
    raw += [p.strip() for p in (knob("RADIANCE_PQ_SKIP") or "").split(",") if p.strip()]
    out = []
    for p in raw:
        try:
            out.append(re.compile(p))
        except re.error as exc:
            raise ValueError(f"skip pattern {p!r} (modules_to_not_convert / RADIANCE_PQ_SKIP) is not a regex: {exc}") from None
    return out


def checkpoint_skips(config: dict, bits: int, group_size: int) -> list[str]:
    """The checkpoint's unquantized modules: `modules_to_not_convert`, and the negative (`-:regex`)
    keys of `dynamic` (GPTQModel's convention, which z-lab's checkpoints use: `re.match` on the module
    name). A positive key may only restate this format's bits / group_size: radiance serves one
    grid per checkpoint, so any other override is refused, naming the key."""
    skips = list(config.get("modules_to_not_convert") or [])
    dynamic = config.get("dynamic") or {}
    if not isinstance(dynamic, dict):
        raise FormatError(f"config.json quantization_config.dynamic must be a mapping of regex -> overrides, got {dynamic!r}")
    same = {"bits": bits, "group_size": group_size}
    for key, overrides in dynamic.items():
        if key.startswith("-:"):
            skips.append("^(?:" + key.removeprefix("-:") + ")")
            continue
        extra = {k: v for k, v in (overrides or {}).items() if same.get(k, object()) != v}
        if extra:
            raise FormatError(f"config.json quantization_config.dynamic[{key!r}] overrides {extra}: radiance serves "
                              f"one grid per checkpoint (bits={bits}, group_size={group_size}); only '-:' (leave "
                              "unquantized) keys are supported")
    return skips


def checkpoint_names(name: str, hf_prefixes: list[tuple[str, str]]) -> list[str]:
    """`name` (vLLM's) and what the checkpoint may call it: vLLM's model classes rename checkpoint
    prefixes (Qwen3.5: model.language_model. -> model., or language_model.model. for the VL class);
    `hf_prefixes` is their (vLLM prefix, checkpoint prefix) pairs (RadianceQuantConfig.apply_vllm_mapper)."""
    return [name] + [hf + name[len(v):] for v, hf in hf_prefixes if name.startswith(v)]


def is_skipped(prefix: str, packed: dict[str, list[str]], patterns: list[re.Pattern],
               hf_prefixes: list[tuple[str, str]] = ()) -> bool:
    """A merged vLLM layer is skipped only if every projection in it is. A pattern matches a
    projection under vLLM's name or the checkpoint's (see checkpoint_names)."""
    head, _, last = prefix.rpartition(".")
    names = [f"{head}.{s}" if head else s for s in packed.get(last, [])] or [prefix]
    hits = [any(p.search(alias) for p in patterns for alias in checkpoint_names(name, list(hf_prefixes)))
            for name in names]
    if any(hits) and not all(hits):
        raise FormatError(
            f"{prefix}: vLLM merges {', '.join(names)} into one layer, but only some of them are listed as "
            "unquantized; skip all of them or none"
        )
    return all(hits)


@register_weight_loader_v2_supported_method
class SkinnyUnquantizedLinearMethod(UnquantizedLinearMethod):
    """vLLM's unquantized weights, computed through radiance's op so GPU rows can route skinny
    (decode-band) calls to a split-K kernel instead of a GEMM library's poor small-M choice."""

    def __init__(self, prefix: str = "", kernels: KernelConfig | None = None) -> None:
        super().__init__()
        self.prefix = prefix
        self.kernels = kernels  # the quant config's (None: the knobs as set at load)

    def create_weights(self, layer, input_size_per_partition, output_partition_sizes, input_size,
                       output_size, params_dtype, **extra_weight_attrs):
        super().create_weights(layer, input_size_per_partition, output_partition_sizes, input_size,
                               output_size, params_dtype, **extra_weight_attrs)
        custom_op.declare(layer, self.prefix, sum(output_partition_sizes))

    def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
        prep = ops.prepare("dense", {"weight": layer.weight.data}, config=self.kernels)
        if cpu_gemm.use_vllm_gemm(layer, prep) is not None:
            # vLLM's GEMM holds what it needs (a packed copy, or this weight): as vLLM's own
            # unquantized method, the parameter keeps nothing more
            layer.weight = torch.nn.Parameter(layer.weight.data.new_empty(0), requires_grad=False)
        custom_op.attach(layer, prep)

    def apply(self, layer, x, bias=None):
        return custom_op.apply(layer, x, bias)
