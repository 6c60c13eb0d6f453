"""Per-layer ops the vLLM plugin calls: `prepare` once after loading, then `linear_forward` per call.

`prepare(method, weights, rotations, partition_sizes)` builds a `PreparedLinear`
(kernels/linear.py) and hands it to the code its method's `MethodSpec` (kernels/methods/) names
for the platform, which lays the weights out and plans the kernel per row count from that method's
registry (kernels/registry.py). `linear_forward(prep, x, bias)` then calls the platform's forward.
A (method, platform) pair the spec has no entry for is an error naming it (no silent fallback).
On CPU every method computes exactly what `radiance.kernels.reference` computes or (the default,
folded) the same up to rounding: kernels/cpu_ops.py.

No vLLM import here: `radiance.kernels` must run without vLLM.
"""

from __future__ import annotations

import torch

from radiance.kernels import methods
from radiance.kernels.config import KernelConfig
from radiance.kernels.linear import (  # noqa: F401 -- re-exported: callers say ops.PreparedLinear
    KernelFn, PreparedLinear, Rotation, Run, check_partitions, dedup_rotations, platform_of, rotate_all)
from radiance.kernels.methods import resolve
from radiance.kernels.producers import Producer, check_inputs


def linear_forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y [M, N] = the layer applied to x [M, K] (plus bias), by the kernels planned at prepare."""
    if x.dim() != 2 or x.shape[1] != prep.in_features:
        raise ValueError(f"radiance: expected input [M, {prep.in_features}], got {list(x.shape)}")
    return prep.forward(prep, x, bias)  # type: ignore[misc]


def produced_forward(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = the layer applied to the output of the op before it (kernels/producers.py), that op
    fused into the layer's prologue where the platform has a producer for the method."""
    ok, why = can_produce(prep)
    if not ok:
        raise NotImplementedError(f"radiance: {why}")
    check_inputs(producer, prep.in_features)
    return resolve(methods.get(prep.method).platforms[prep.platform].produced)(prep, producer, bias)


def can_produce(prep: PreparedLinear) -> tuple[bool, str]:
    """Whether produced_forward takes this layer, and why not."""
    entry = methods.get(prep.method).platforms.get(prep.platform)
    if entry is None or entry.produced is None:
        return False, (f"no fused producer for method={prep.method} on platform={prep.platform} "
                       f"(kernels/methods/{prep.method}.py names none)")
    return True, ""


def unfused(prep: PreparedLinear, producer: Producer, bias: torch.Tensor | None) -> torch.Tensor:
    """The producer's own ops (reference.py), then the layer: the CPU keeps the exact unfused path."""
    return linear_forward(prep, producer.plain(), bias)


def prepare(method: str, weights: dict[str, torch.Tensor], rotations: list[Rotation] | None = None,
            partition_sizes: list[int] | None = None, platform: str | None = None,
            config: KernelConfig | None = None) -> PreparedLinear:
    """One linear's checkpoint tensors (`weights`: the method's tensors other than the rotation's,
    concatenated along N over the partitions) -> the prepared layer. A rotated method takes one
    Rotation and one size (vLLM's output partition sizes) per partition; identical adjacent
    rotations are merged. `platform`: the tensors' device's unless given (the offline compile check
    prepares CPU tensors for a GPU). `config`: the knobs, resolved once at load (default: as the
    environment sets them now); the layer keeps it."""
    spec = methods.get(method)
    config = config or KernelConfig.from_knobs()
    missing = set(spec.weights) - set(weights)
    if missing:
        raise ValueError(f"radiance {method}: missing tensors {sorted(missing)} (it takes {list(spec.weights)})")
    codes = weights[spec.codes]
    n, k = spec.nk(tuple(codes.shape))
    platform = platform or platform_of(codes.device)
    entry = spec.platform(platform)  # a platform without this method's kernels fails here, naming both
    if spec.rotated:
        distinct, runs = dedup_rotations(rotations or [], partition_sizes or [])
        prep = PreparedLinear(method, platform, k, n, rotations=distinct, runs=runs, config=config)
        first = distinct[0]  # the format's rotation fields: partition 0's (the distinct ones are prep.rotations)
        tensors = resolve(spec.tensor_set)(**weights, pairs=first.pairs, theta=first.theta,
                                           channel_scales=first.channel_scales)
    else:
        prep = PreparedLinear(method, platform, k, n, runs=[Run(0, n, -1)], config=config)
        tensors = resolve(spec.tensor_set)(**weights) if spec.tensor_set else codes
    prep.forward = resolve(entry.forward)
    resolve(entry.prepare)(prep, tensors)
    return prep


def prepare_parts(method: str, parts: list, platform: str | None = None,
                  config: KernelConfig | None = None) -> PreparedLinear:
    """A merged linear from its partitions' tensor sets (kernels/formats; a dense method's: its
    weights): the weights concatenated along N, one rotation per partition (tests, benchmarks)."""
    spec = methods.get(method)

    def field(p, name):
        return getattr(p, name) if spec.tensor_set else p

    weights = {name: torch.cat([field(p, name) for p in parts], t.n_dim) for name, t in spec.weights.items()}
    sizes = [spec.nk(tuple(field(p, spec.codes).shape))[0] for p in parts]
    return prepare(method, weights, [Rotation.of(p) for p in parts] if spec.rotated else None, sizes, platform, config)
