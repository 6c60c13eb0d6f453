"""One prepared linear as the per-layer ops see it, whatever the platform: its distinct rotations
and the output-column runs each one serves (identical adjacent partitions merged), and the
guards every platform applies. No vLLM, no kernels here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from radiance.kernels import reference


@dataclass
class Rotation:
    """One distinct rotation of a linear's input: raw tensors (for kernels) and the CPU plan."""

    pairs: torch.Tensor  # [krot, K] int16
    theta: torch.Tensor  # [krot, K/2] float16
    channel_scales: torch.Tensor  # [1, K] float16
    plan: reference.RotationPlan


@dataclass(frozen=True)
class Run:
    """Output columns [n0, n1) are computed from rotated input copy `rotation`."""

    n0: int
    n1: int
    rotation: int


@dataclass
class PreparedLinear:
    """What one layer's kernels need, built once after loading."""

    method: str
    platform: str
    in_features: int
    out_features: int
    rotations: list[Rotation] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    forward: Callable | None = None  # (prep, x, bias) -> y: the platform's, set at prepare
    data: dict[str, torch.Tensor] = field(default_factory=dict)  # per-platform payload
    # CPU (kernels/cpu_folded.py), handed over by the plugin: `gemm` (x, bias) -> y, vLLM's own GEMM on
    # the folded weight (else torch's); `run_gemms`, per run, vLLM's int4 GEMM on the rotated copy
    gemm: Callable | None = None
    run_gemms: list[Callable] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.method, self.platform)


KernelFn = Callable[[PreparedLinear, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


def platform_of(device: torch.device) -> str:
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return device.type


def dedup_rotations(
    rotations: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], sizes: list[int]
) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], list[Run]]:
    """Merge identical adjacent per-partition rotations into runs of output columns."""
    if len(rotations) != len(sizes):
        raise ValueError(f"radiance: {len(rotations)} rotations for {len(sizes)} partitions")
    distinct: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    runs: list[Run] = []
    n0 = 0
    for rot, size in zip(rotations, sizes):
        same = bool(distinct) and all(torch.equal(a, b) for a, b in zip(distinct[-1], rot))
        if same:
            last = runs[-1]
            runs[-1] = Run(last.n0, n0 + size, last.rotation)
        else:
            distinct.append(rot)
            runs.append(Run(n0, n0 + size, len(distinct) - 1))
        n0 += size
    return distinct, runs


def rotate_all(prep: PreparedLinear, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One rotated copy of x per distinct rotation (the tuple the GEMM takes)."""
    return tuple(reference.apply_rotation(x, r.plan, r.channel_scales) for r in prep.rotations)


def check_partitions(prep: PreparedLinear, xs: tuple[torch.Tensor, ...]) -> None:
    """The partition-count guard: a rotated-activation tuple must match the layer exactly.

    On a GPU a mismatched tuple makes the GEMM read past the activation buffer (a hang, not a
    fault), so every platform checks it here first."""
    if len(xs) != len(prep.rotations):
        raise ValueError(
            f"radiance: rotated-activation tuple has {len(xs)} copies but the layer has "
            f"{len(prep.rotations)} distinct rotations (runs {[(r.n0, r.n1, r.rotation) for r in prep.runs]})"
        )
    for i, xr in enumerate(xs):
        if xr.dim() != 2 or xr.shape[1] != prep.in_features:
            raise ValueError(f"radiance: rotated copy {i} has shape {list(xr.shape)}, expected [M, {prep.in_features}]")
