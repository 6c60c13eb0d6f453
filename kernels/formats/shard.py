"""Tensor-parallel sharding of radiance checkpoints, as vLLM shards them.

Column-parallel layers (QKV, gate_up) split the output dim N of every partition evenly across
ranks; row-parallel layers (o/out, down) split the input dim K. vLLM does this through its
parameter classes when it loads a checkpoint (plugin/); this module is the same rule for code that
runs without vLLM (the TP test and bench on the device).

paroquant's K split is exact only because `pairs` index channels inside their own 128-group: a
shard that starts on a group boundary carries whole groups with valid local indices. A boundary
that is not a multiple of 128 is refused here, as the plugin refuses it at load time.
"""

from __future__ import annotations

import torch

from radiance.kernels.formats import FormatError
from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors
from radiance.kernels.formats.pq2 import Pq2Tensors

PACK = 8  # int4 values per int32 along N (qweight / qzeros columns)


def _span(total: int, rank: int, world: int, what: str, align: int) -> tuple[int, int]:
    if total % world or (total // world) % align:
        raise FormatError(
            f"{what}: {total} does not split into {world} shards of a multiple of {align} "
            f"(got {total / world:g} per rank); choose a tensor-parallel size that divides it"
        )
    size = total // world
    return rank * size, (rank + 1) * size


def column_spans(partitions: list[int], rank: int, world: int, what: str, align: int = 1) -> list[tuple[int, int]]:
    """This rank's [n0, n1) inside each partition, in the global column numbering."""
    spans, base = [], 0
    for p, size in enumerate(partitions):
        a, b = _span(size, rank, world, f"{what} partition {p}", align)
        spans.append((base + a, base + b))
        base += size
    return spans


def paroquant_column(t: ParoTensors, partitions: list[int], rank: int, world: int, layer: str) -> ParoTensors:
    """Split N per partition; the rotation (over K) is whole on every rank."""
    spans = column_spans(partitions, rank, world, f"{layer} (paroquant N)", align=PACK)
    cols = lambda x, d: torch.cat([x[:, a // d: b // d] for a, b in spans], dim=1)  # noqa: E731
    return ParoTensors(cols(t.qweight, PACK), cols(t.qzeros, PACK), cols(t.scales, 1),
                       t.pairs, t.theta, t.channel_scales)


def paroquant_row(t: ParoTensors, rank: int, world: int, layer: str) -> ParoTensors:
    """Split K on 128-group boundaries: weights, zero points, scales and the rotation together."""
    a, b = _span(t.in_features, rank, world, f"{layer} (paroquant K)", align=GROUP_SIZE)
    g0, g1 = a // GROUP_SIZE, b // GROUP_SIZE
    return ParoTensors(t.qweight[a:b], t.qzeros[g0:g1], t.scales[g0:g1],
                       t.pairs[:, a:b], t.theta[:, a // 2: b // 2], t.channel_scales[:, a:b])


def pq2_column(t: Pq2Tensors, partitions: list[int], rank: int, world: int, layer: str) -> Pq2Tensors:
    spans = column_spans(partitions, rank, world, f"{layer} (pq2 N)")
    rows = lambda x: torch.cat([x[a:b] for a, b in spans], dim=0)  # noqa: E731
    return Pq2Tensors(rows(t.qweight), rows(t.scales))


def pq2_row(t: Pq2Tensors, rank: int, world: int, layer: str) -> Pq2Tensors:
    a, b = _span(t.in_features, rank, world, f"{layer} (pq2 K)", align=GROUP_SIZE)
    return Pq2Tensors(t.qweight[:, a // 4: b // 4], t.scales[:, a // GROUP_SIZE: b // GROUP_SIZE])
