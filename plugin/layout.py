"""Where one vLLM linear's checkpoint tensors come from and how they are split across TP ranks.

A merged vLLM linear has P output partitions (vLLM's `output_sizes`: q/k/v, gate/up, Qwen3.5's
in_proj_qkvz = q/k/v/z, ...). A checkpoint tensor fills one partition (shard id "q", 0, ...),
a consecutive span of them (a tuple shard id: Qwen3.5's `in_proj_qkv` -> in_proj_qkvz (0, 1, 2)),
or all of them (no shard id: a projection fused on disk, e.g. Qwen3-Next's one-partition
in_proj_qkvz). Which checkpoint module a partition belongs to is vLLM's `packed_modules_mapping`
in order; where the mapping names fewer modules than the layer has partitions, the spans are
learnt from the shard ids the loader passes.
"""

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
    shard_ids: list  # vLLM's shard id of each partition: [None], ["q", "k", "v"] or [0, 1, ...]
    names: list[str]  # checkpoint module name of each partition (a span's partitions share one)
    sizes: list[int]  # output columns of each partition on this rank
    disk_n: list[int]  # output columns of each partition on disk
    disk_k: int  # input features on disk
    k: int  # input features this rank's weights cover
    tp_rank: int = 0
    tp_size: int = 1
    row_sharded: bool = False  # K narrowed per rank by vLLM (exact: rotations are local to 128-groups)
    # misaligned row split: whole weights on every rank, input all-gathered, rank 0 computes
    replicated: bool = False
    loaded: set = field(default_factory=set)  # (tensor, partition index)
    # checkpoint modules (packed_modules_mapping order) whose partitions the shard ids tell; [] when
    # `names` is known from the start (one module per partition, or one for the whole layer)
    modules: list[str] = field(default_factory=list)
    spans: dict[int, tuple[int, ...]] = field(default_factory=dict)  # first partition -> its span

    @property
    def merged(self) -> bool:
        return self.shard_ids != [None]

    def index(self, shard_id) -> int:
        try:
            return self.shard_ids.index(shard_id)
        except ValueError:
            raise FormatError(f"{self.prefix}: unexpected shard id {shard_id!r} (layer has {self.shard_ids})") from None

    def parts(self, shard_id) -> tuple[int, ...]:
        """The partitions one loaded tensor fills: one, a consecutive tuple, or all (None)."""
        if shard_id is None:
            return tuple(range(len(self.shard_ids)))
        if not isinstance(shard_id, tuple):
            return (self.index(shard_id),)
        idx = tuple(self.index(s) for s in shard_id)
        if not idx or idx != tuple(range(idx[0], idx[0] + len(idx))):
            raise FormatError(f"{self.prefix}: shard id {shard_id!r} is not a consecutive span of the layer's "
                              f"partitions {self.shard_ids}")
        return idx

    def disk_n_of(self, shard_id) -> int:
        return sum(self.disk_n[p] for p in self.parts(shard_id))

    def name_of(self, shard_id) -> str:
        """The checkpoint module a loaded tensor belongs to (learning its span where needed)."""
        ps = self.parts(shard_id)
        if shard_id is None and len(ps) > 1:  # one tensor fused on disk under vLLM's own name
            self.names, self.modules = [self.prefix] * len(ps), []
        self._learn(ps)
        return " + ".join(dict.fromkeys(self.names[p] for p in ps))

    def tensor_name(self, shard_id, tensor: str) -> str:
        return f"{self.name_of(shard_id)}.{tensor}"

    def mark(self, tensor: str, shard_id) -> None:
        self.loaded.update((tensor, p) for p in self.parts(shard_id))

    def missing(self, tensors: tuple[str, ...]) -> list[str]:
        self._resolve(finished=True)
        out: list[str] = []
        for t in tensors:
            for p in range(len(self.shard_ids)):
                name = f"{self.names[p]}.{t}"
                if (t, p) not in self.loaded and name not in out:
                    out.append(name)
        return out

    def partition_bounds(self) -> list[tuple[int, int]]:
        out, n0 = [], 0
        for size in self.sizes:
            out.append((n0, n0 + size))
            n0 += size
        return out

    # -- spans: which checkpoint module each partition belongs to, where the mapping alone cannot say
    def _learn(self, ps: tuple[int, ...]) -> None:
        if not self.modules:
            return
        if ps[0] in self.spans and self.spans[ps[0]] == ps:
            return
        taken = {p for span in self.spans.values() for p in span}
        if taken & set(ps):
            raise FormatError(f"{self.prefix}: a checkpoint tensor fills partitions {list(ps)}, but others fill "
                              f"{sorted(self.spans.values())}: the shard ids of one layer must not overlap")
        self.spans[ps[0]] = ps
        self._resolve()

    def _module(self, ordinal: int) -> str:
        head = self.prefix.rpartition(".")[0]
        return f"{head}.{self.modules[ordinal]}" if head else self.modules[ordinal]

    def _resolve(self, finished: bool = False) -> None:
        """Name each learnt span: the first partition's is the first module, the last partition's
        the last, one after a fully known run of spans the next; `finished` (after loading): the
        partitions no tensor filled belong to the one module no span was named for."""
        if not self.modules:
            return
        last, count = len(self.shard_ids) - 1, len(self.modules)
        for a, span in sorted(self.spans.items()):
            before = [s for b, s in self.spans.items() if b < a]
            if a == 0:
                ordinal = 0
            elif span[-1] == last:
                ordinal = count - 1
            elif sum(len(s) for s in before) == a:  # every earlier partition's span is known
                ordinal = len(before)
            else:
                continue
            if ordinal >= count:
                raise FormatError(f"{self.prefix}: vLLM merges {', '.join(self.modules)} into {last + 1} partitions, "
                                  f"but the checkpoint's tensors fill them in more spans {sorted(self.spans.values())}")
            for p in span:
                self.names[p] = self._module(ordinal)
        if finished:
            named = {self._module(i) for i in range(count)}
            unused = [i for i in range(count) if self._module(i) not in self.names]
            unknown = [p for p in range(last + 1) if self.names[p] not in named]
            if len(unused) == 1 and unknown and unknown == list(range(unknown[0], unknown[-1] + 1)):
                for p in unknown:
                    self.names[p] = self._module(unused[0])


def _names(prefix: str, packed: dict[str, list[str]], count: int) -> tuple[list[str], list[str]]:
    """(checkpoint module name of each partition, modules whose spans the shard ids will tell)."""
    head, _, last = prefix.rpartition(".")
    subs = packed.get(last)
    if subs and len(subs) == count:
        return [f"{head}.{s}" if head else s for s in subs], []
    if subs and len(subs) < count:  # some module fills several partitions (tuple shard ids)
        return [f"{prefix}[partition {i} of {count}: one of {', '.join(subs)}]" for i in range(count)], list(subs)
    return [prefix] * count if count == 1 else [f"{prefix}[{i}]" for i in range(count)], []


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
    if len(sizes) != len(shard_ids):
        raise FormatError(f"{prefix}: vLLM gives {len(sizes)} output partitions for {len(shard_ids)} shards")
    names, modules = _names(prefix, packed, len(shard_ids))
    lay = Layout(
        prefix=prefix, shard_ids=shard_ids, names=names, sizes=sizes, disk_n=disk_n, disk_k=layer.input_size,
        k=input_size_per_partition, tp_rank=tp_rank, tp_size=tp_size, modules=modules,
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
