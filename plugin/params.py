"""vLLM parameters for radiance's tensors, with loaders that check what the checkpoint holds.

N-packed tensors (qweight, qzeros, scales) use vLLM's own parameter classes, so TP sharding and
merged-shard offsets are vLLM's code. Rotation tensors are per projection: a merged linear keeps
one copy per shard ([P, ...]) and `rotation_loader` puts each where vLLM's shard id says.
vLLM's loaders cast dtypes silently and assert shapes without a message, so every loader here
first checks the tensor against the format (`TensorSpec`) and names it in the error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from vllm.model_executor.parameter import BasevLLMParameter, GroupQuantScaleParameter, PackedvLLMParameter

from radiance.kernels.formats import FormatError
from radiance.plugin.layout import Layout


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: torch.dtype
    disk_shape: Callable[[int, int], tuple[int, ...]]  # (K, N) on disk -> shape on disk


def check_tensor(lay: Layout, spec: TensorSpec, loaded: torch.Tensor, shard_id) -> None:
    if lay.merged and shard_id is None:
        raise FormatError(
            f"{lay.prefix}.{spec.name}: checkpoint stores the merged tensor; radiance expects one tensor "
            f"per projection ({', '.join(lay.names)})"
        )
    name = lay.tensor_name(shard_id, spec.name)
    want = spec.disk_shape(lay.disk_k, lay.disk_n[lay.index(shard_id)])
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
    """[P, *shape]: one copy per vLLM shard; the last dim is K (narrowed per rank when row-sharded)."""
    data = torch.empty((len(lay.shard_ids), *shape), dtype=spec.dtype)

    def load(param, loaded_weight, shard_id=None):
        check_tensor(lay, spec, loaded_weight, shard_id)
        w = loaded_weight
        if lay.row_sharded:  # pairs are local to 128-groups and ranks hold whole groups: a plain narrow
            width = param.data.shape[-1]
            w = w.narrow(-1, lay.tp_rank * width, width)
        param.data[lay.index(shard_id)].copy_(w)
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


def partition_rotation(layer, p: int) -> tuple:
    """(pairs, theta, channel_scales) of partition p of a rotated layer."""
    return layer.pairs.data[p], layer.theta.data[p], layer.channel_scales.data[p]
