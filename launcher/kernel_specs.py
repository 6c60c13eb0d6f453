"""The kernel-relevant shapes of a checkpoint's linears as one vLLM rank will prepare them.

The launcher's NVIDIA build step warms the kernels for these shapes (kernels/warmup.py) before vLLM
starts. Read from the safetensors headers (and, for paroquant, the small rotation tensors) of the
checkpoint, byte for byte: no torch here, the launcher runs where only radiance is installed; vLLM's merges and tensor-parallel splits of Llama/Qwen-family layers are applied here.
A shape missed here is not an error: the worker warms its own layers at load and logs what it had
to compile that the launcher did not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from radiance.checkpoint import CheckpointError, read_header
from radiance.kernels.linear_spec import LinearSpec
from radiance.kernels.methods import METHODS, ROTATED_METHODS

GROUP = 128
# vLLM's merged projections (its packed_modules_mapping for Llama/Qwen-family models), in order
MERGED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
ROW_PARALLEL = ("o_proj", "down_proj")  # input features split across TP ranks
LINEAR_NAMES = {p for parts in MERGED.values() for p in parts} | set(ROW_PARALLEL)
ROTATION = ("pairs", "theta", "channel_scales")


class SpecError(ValueError):
    """The checkpoint cannot be read as the quant method says."""


def headers(model_dir: Path) -> dict[str, tuple[Path, list[int], tuple[int, int]]]:
    """tensor name -> (shard, shape, (first byte, end byte) in the shard), from the safetensors headers."""
    out: dict[str, tuple[Path, list[int], tuple[int, int]]] = {}
    for shard in sorted(Path(model_dir).glob("*.safetensors")):
        try:
            meta = read_header(shard, data=False)
        except CheckpointError as e:
            raise SpecError(str(e)) from None
        out.update({k: (shard, list(t.shape), (t.start, t.end)) for k, t in meta.items()})
    if not out:
        raise SpecError(f"{model_dir}: no *.safetensors weights")
    return out


def activation_dtype(config: dict, stack_dtype: str) -> str:
    if stack_dtype != "auto":
        return stack_dtype
    found = config.get("torch_dtype") or config.get("dtype") or "bfloat16"
    return "float16" if found == "float16" else "bfloat16"  # vLLM serves fp32 checkpoints in bf16 on GPUs


def _raw(tensors: dict, name: str) -> bytes:
    shard, _, (start, end) = tensors[name]
    with shard.open("rb") as f:
        f.seek(start)
        return f.read(end - start)


def _distinct_runs(model_dir: Path, tensors: dict, modules: list[str], sizes: list[int]) -> tuple[int, ...]:
    """paroquant: partitions with the same rotation as the one before merge into one run (ops.dedup_rotations;
    equal bytes of one dtype are equal tensors)."""
    runs: list[int] = []
    prev = None
    for mod, size in zip(modules, sizes):
        rot = [_raw(tensors, f"{mod}.{t}") for t in ROTATION]
        if prev is not None and prev == rot:
            runs[-1] += size
        else:
            runs.append(size)
        prev = rot
    return tuple(runs)


@dataclass(frozen=True)
class Group:
    """One linear as vLLM builds it: its checkpoint modules (several where vLLM merges them)."""

    modules: tuple[str, ...]
    method: str  # the stack's quant method, or dense (a skipped 2-D weight)
    sizes: tuple[int, ...]  # output columns of each module, full model
    k: int  # input features, full model
    row_parallel: bool
    bias: bool

    @property
    def shape(self) -> tuple[int, int]:
        """(N, K) of the whole model's linear: what a stack's `check_shapes` names."""
        return sum(self.sizes), self.k


def linear_groups(model_dir: Path, quant: str) -> tuple[list[Group], dict]:
    """The checkpoint's quantized (and skipped 2-D) linears as vLLM merges them, and the tensor headers."""
    model_dir = Path(model_dir)
    tensors = headers(model_dir)
    spec, dense = METHODS.get(quant), METHODS["dense"]
    kinds: dict[str, tuple[str, tuple[int, int]]] = {}  # module -> (method, (N, K))
    for name, (_, shape, _) in tensors.items():
        mod, _, last = name.rpartition(".")
        if mod.rpartition(".")[2] not in LINEAR_NAMES:
            continue
        if spec is not None and last == spec.codes and f"{mod}.{spec.marked_by}" in tensors:  # mxfp4: weight is codes
            kinds[mod] = (quant, spec.nk(tuple(shape)))
        elif last == "weight" and len(shape) == 2:
            kinds[mod] = ("dense", dense.nk(tuple(shape)))
    groups: list[Group] = []
    done: set[str] = set()
    for mod in sorted(kinds):
        if mod in done:
            continue
        head, _, last = mod.rpartition(".")
        group = next(([f"{head}.{p}" for p in parts] for parts in MERGED.values() if last in parts), [mod])
        if not all(m in kinds for m in group):
            group = [mod]  # a checkpoint that does not hold every projection vLLM merges: as it is
        done.update(group)
        methods = {kinds[m][0] for m in group}
        if len(methods) != 1:
            raise SpecError(f"{model_dir}: {', '.join(group)} are merged by vLLM but only some are quantized")
        groups.append(Group(tuple(group), methods.pop(), tuple(kinds[m][1][0] for m in group), kinds[group[0]][1][1],
                            last in ROW_PARALLEL, any(f"{m}.bias" in tensors for m in group)))
    return groups, tensors


def linear_specs(model_dir: Path, quant: str, tp: int, stack_dtype: str = "auto") -> list[LinearSpec]:
    """The distinct LinearSpecs of the checkpoint's quantized (and skipped 2-D) linears on one rank."""
    model_dir = Path(model_dir)
    config = json.loads((model_dir / "config.json").read_text())
    dtype = activation_dtype(config, stack_dtype)
    groups, tensors = linear_groups(model_dir, quant)
    specs: set[LinearSpec] = set()
    for g in groups:
        k, sizes = g.k, list(g.sizes)
        if g.row_parallel and tp > 1:
            k = k // tp if (k // tp) % GROUP == 0 and k % tp == 0 else k  # misaligned: replicated (plugin/layout)
        elif tp > 1:
            sizes = [s // tp for s in sizes]
        rotated = g.method in ROTATED_METHODS
        runs = _distinct_runs(model_dir, tensors, list(g.modules), sizes) if rotated else (sum(sizes),)
        # a row-parallel layer adds its bias on rank 0 only: the other ranks call without one
        for b in {g.bias, g.bias and not (g.row_parallel and tp > 1)}:
            specs.add(LinearSpec(g.method, runs, k, b, dtype))
    return sorted(specs, key=lambda s: (s.method, s.sizes, s.k, s.bias))
