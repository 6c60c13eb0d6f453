"""Where one vLLM linear's checkpoint tensors come from and how they are split across TP ranks."""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.model_executor.layers.linear import (
    ColumnParallelLinear,
    MergedColumnParallelLinear,
    QKVParallelLinear,
    ReplicatedLinear,
    RowParallelLinear,
)

from radiance.kernels.formats import FormatError

GROUP = 128
_QKV = ("q", "k", "v")


@dataclass
class Layout:
    prefix: str  # vLLM module name, e.g. model.layers.0.self_attn.qkv_proj
    shard_ids: list  # vLLM's shard ids: [None], ["q", "k", "v"] or [0, 1, ...]
    names: list[str]  # checkpoint module name of each shard
    sizes: list[int]  # output columns of each shard on this rank
    disk_n: list[int]  # output columns of each shard on disk
    disk_k: int  # input features on disk
    k: int  # input features this rank's weights cover
    tp_rank: int = 0
    tp_size: int = 1
    row_sharded: bool = False  # K narrowed per rank by vLLM (exact: rotations are local to 128-groups)
    # misaligned row split: whole weights on every rank, input all-gathered, rank 0 computes
    replicated: bool = False
    loaded: set = field(default_factory=set)

    @property
    def merged(self) -> bool:
        return self.shard_ids != [None]

    def index(self, shard_id) -> int:
        try:
            return self.shard_ids.index(shard_id)
        except ValueError:
            raise FormatError(f"{self.prefix}: unexpected shard id {shard_id!r} (layer has {self.shard_ids})") from None

    def tensor_name(self, shard_id, tensor: str) -> str:
        return f"{self.names[self.index(shard_id)]}.{tensor}"

    def mark(self, tensor: str, shard_id) -> None:
        self.loaded.add((tensor, shard_id))

    def missing(self, tensors: tuple[str, ...]) -> list[str]:
        return [self.tensor_name(s, t) for t in tensors for s in self.shard_ids if (t, s) not in self.loaded]

    def partition_bounds(self) -> list[tuple[int, int]]:
        out, n0 = [], 0
        for size in self.sizes:
            out.append((n0, n0 + size))
            n0 += size
        return out


def _names(prefix: str, packed: dict[str, list[str]], count: int) -> list[str]:
    head, _, last = prefix.rpartition(".")
    subs = packed.get(last)
    if subs and len(subs) == count:
        return [f"{head}.{s}" if head else s for s in subs]
    return [prefix] if count == 1 else [f"{prefix}[{i}]" for i in range(count)]


def layout_of(
    layer, prefix: str, input_size_per_partition: int, output_partition_sizes: list[int],
    packed: dict[str, list[str]], method: str,
) -> Layout:
    """Describe `layer`; raise FormatError for a split radiance's formats cannot serve."""
    sizes = list(output_partition_sizes)
    tp_rank, tp_size = getattr(layer, "tp_rank", 0), getattr(layer, "tp_size", 1)
    if isinstance(layer, QKVParallelLinear):
        shard_ids: list = list(_QKV)
        disk_n = [layer.total_num_heads * layer.head_size, layer.total_num_kv_heads * layer.head_size,
                  layer.total_num_kv_heads * layer.v_head_size]
    elif isinstance(layer, MergedColumnParallelLinear):
        shard_ids = list(range(len(layer.output_sizes)))
        disk_n = list(layer.output_sizes)
    elif isinstance(layer, (ColumnParallelLinear, RowParallelLinear, ReplicatedLinear)):
        if len(sizes) != 1:
            raise FormatError(f"{prefix}: {type(layer).__name__} with {len(sizes)} merged outputs is not supported")
        shard_ids, disk_n = [None], [layer.output_size]
    else:
        raise FormatError(f"{prefix}: radiance {method} does not handle {type(layer).__name__} layers")
    lay = Layout(
        prefix=prefix, shard_ids=shard_ids, names=_names(prefix, packed, len(shard_ids)), sizes=sizes,
        disk_n=disk_n, disk_k=layer.input_size, k=input_size_per_partition, tp_rank=tp_rank, tp_size=tp_size,
    )
    if lay.disk_k % GROUP:
        raise FormatError(
            f"{prefix}: in_features {lay.disk_k} is not a multiple of the {GROUP}-group; "
            f"radiance {method} cannot quantize this layer (list it in the checkpoint's modules_to_not_convert)"
        )
    if isinstance(layer, RowParallelLinear) and tp_size > 1:
        if input_size_per_partition % GROUP == 0:
            lay.row_sharded = True
        else:
            # A 128-group would straddle two ranks; rotating/quantizing it needs the whole group.
            lay.replicated, lay.k = True, lay.disk_k
    return lay
