"""vLLM parameters for radiance's tensors, with loaders that check what the checkpoint holds.

N-packed tensors (qweight, qzeros, scales) use vLLM's own parameter classes, so TP sharding and
merged-shard offsets are vLLM's code (a tuple shard id -- one checkpoint tensor over several
partitions, Qwen3.5's in_proj_qkv -- is split by vLLM's fused-module loader). Rotation tensors are
per projection: a merged linear keeps one copy per partition ([P, ...]) and the rotation loader
puts each where vLLM's shard id says (into every partition of a tuple's span).
vLLM's loaders cast dtypes silently and assert shapes without a message, so every loader here
first checks the tensor against the format (`TensorSpec`) and names it in the error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from vllm.model_executor.parameter import BasevLLMParameter, GroupQuantScaleParameter, PackedvLLMParameter

from radiance.kernels import methods, ops
from radiance.kernels.formats import FormatError
from radiance.kernels.linear import DTYPES
from radiance.plugin.layout import Layout


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: torch.dtype
    disk_shape: Callable[[int, int], tuple[int, ...]]  # (K, N) on disk -> shape on disk


def tensor_specs(method: str, krot: int = 0) -> dict[str, TensorSpec]:
    """The method's checkpoint tensors (kernels/methods) as the loaders check them."""
    return {name: TensorSpec(name, DTYPES[t.dtype], lambda k, n, t=t: t.shape(n, k, krot))
            for name, t in methods.get(method).tensors.items()}


def check_tensor(lay: Layout, spec: TensorSpec, loaded: torch.Tensor, shard_id) -> None:
    """`loaded` is what the checkpoint holds for the partitions `shard_id` names (one, a tuple's
    consecutive span, or all of them for None: a projection stored fused)."""
    name = lay.tensor_name(shard_id, spec.name)
    want = spec.disk_shape(lay.disk_k, lay.disk_n_of(shard_id))
    if loaded.dtype != spec.dtype or tuple(loaded.shape) != want:
        raise FormatError(
            f"{name}: expected shape {list(want)} {spec.dtype}, got {list(loaded.shape)} {loaded.dtype} "
            "(re-export the checkpoint with `radiance quantize`)"
        )


def _checked(lay: Layout, spec: TensorSpec, loader: Callable) -> Callable:
    def load(param, loaded_weight, shard_id=None):
        check_tensor(lay, spec, loaded_weight, shard_id)
        if shard_id is None:
            loader(param, loaded_weight)
        else:
            loader(param, loaded_weight, shard_id)
        lay.mark(spec.name, shard_id)

    return load


def packed_param(
    lay: Layout, spec: TensorSpec, shape: tuple[int, int], input_dim: int, output_dim: int,
    packed_dim: int | None, packed_factor: int, weight_loader: Callable,
) -> BasevLLMParameter:
    """An N-split tensor (qweight, qzeros, scales) loaded by vLLM's v2 loader, dtype/shape-checked."""
    data = torch.empty(shape, dtype=spec.dtype)
    loader = _checked(lay, spec, weight_loader)
    if lay.replicated:  # whole tensor on every rank: no narrowing
        return BasevLLMParameter(data=data, weight_loader=loader)
    if packed_dim is None:
        return GroupQuantScaleParameter(data=data, input_dim=input_dim, output_dim=output_dim, weight_loader=loader)
    return PackedvLLMParameter(
        data=data, input_dim=input_dim, output_dim=output_dim, packed_dim=packed_dim,
        packed_factor=packed_factor, weight_loader=loader,
    )


def rotation_param(lay: Layout, spec: TensorSpec, shape: tuple[int, ...]) -> BasevLLMParameter:
    """[P, *shape]: one copy per partition; the last dim is K (narrowed per rank when row-sharded).
    A tensor loaded for several partitions (tuple shard id, or a fused projection) is their
    common rotation: copied into each, and merged again at prepare (ops.dedup_rotations)."""
    data = torch.empty((len(lay.shard_ids), *shape), dtype=spec.dtype)

    def load(param, loaded_weight, shard_id=None):
        check_tensor(lay, spec, loaded_weight, shard_id)
        w = loaded_weight
        if lay.row_sharded:  # pairs are local to 128-groups and ranks hold whole groups: a plain narrow
            width = param.data.shape[-1]
            w = w.narrow(-1, lay.tp_rank * width, width)
        for p in lay.parts(shard_id):
            param.data[p].copy_(w)
        lay.mark(spec.name, shard_id)

    return BasevLLMParameter(data=data, weight_loader=load)


def require_loaded(lay: Layout, tensors: tuple[str, ...]) -> None:
    missing = lay.missing(tensors)
    if missing:
        raise FormatError(f"missing from the checkpoint: {', '.join(missing)} (vLLM layer {lay.prefix})")


def rotation_params(lay: Layout, specs: dict[str, TensorSpec], krot: int) -> dict[str, BasevLLMParameter]:
    """The rotated formats' pairs / theta / channel_scales, one copy per vLLM shard."""
    k = lay.k
    return {"pairs": rotation_param(lay, specs["pairs"], (krot, k)),
            "theta": rotation_param(lay, specs["theta"], (krot, k // 2)),
            "channel_scales": rotation_param(lay, specs["channel_scales"], (1, k))}


def partition_rotation(layer, p: int) -> ops.Rotation:
    """The rotation of partition p of a rotated layer."""
    return ops.Rotation(layer.pairs.data[p], layer.theta.data[p], layer.channel_scales.data[p])


def rotation_limit(method: str, platform: str) -> int | None:
    """The most distinct rotations one GEMM of `method` takes on `platform` (its MethodSpec's
    column); None where any number runs (the CPU) or the platform has no kernels for it (ops.prepare
    then refuses the method there by itself)."""
    entry = methods.get(method).platforms.get(platform)
    return None if entry is None else entry.rotation_limit


def check_rotation_limit(lay: Layout, method: str, rotations: list[ops.Rotation], device) -> None:
    """Refuse, naming the layer, a merged linear whose partitions need more distinct rotations (after
    merging identical adjacent ones, as ops.dedup_rotations does) than this platform's GEMM takes."""
    platform = ops.platform_of(device)
    limit = rotation_limit(method, platform)
    if limit is None:
        return
    distinct, runs = ops.dedup_rotations(rotations, lay.sizes)
    if len(distinct) <= limit:
        return
    bounds = lay.partition_bounds()
    groups = [" + ".join(dict.fromkeys(lay.names[p] for p, (n0, n1) in enumerate(bounds) if r.n0 <= n0 and n1 <= r.n1))
              for r in runs]
    raise FormatError(
        f"{lay.prefix}: {len(distinct)} distinct rotations after merging identical adjacent partitions "
        f"({'; '.join(groups)}), but radiance's {method} GEMM on {platform} takes at most {limit} per layer; "
        "serve this checkpoint on CPU, or quantize it so that projections vLLM merges here share rotations"
    )
