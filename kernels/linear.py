"""One prepared linear as the per-layer ops see it, whatever the platform: its distinct rotations
and the output-column runs each one serves (identical adjacent partitions merged), and the
guards every platform applies. No vLLM, no kernels here.

The one description of a rotated linear from the loader to every kernel: a list of `Rotation`
(the checkpoint's tensors; the CPU plan built on first use) and a list of `Run` (output columns
[n0, n1) read rotated copy `rotation`; runs map 1:1 to the distinct rotations). vLLM's partition
sizes become runs in `dedup_rotations`; a GPU kernel that selects its copy by column takes the
runs' first columns from `kernel_bounds`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from radiance.kernels import reference
from radiance.kernels.config import KernelConfig
from radiance.kernels.formats.paroquant import GROUP_SIZE
from radiance.kernels.methods.spec import GPU_ROTATIONS as MAX_ROTATIONS


# the checkpoint dtypes kernels/methods names (safetensors' spelling) as torch's
DTYPES = {"I32": torch.int32, "I16": torch.int16, "U8": torch.uint8, "F16": torch.float16, "BF16": torch.bfloat16}
NO_COLUMN = 1 << 30  # kernel_bounds' padding: a rotated copy that no column reads


@dataclass(eq=False)
class Rotation:
    """One rotation of a linear's input, as the checkpoint stores it; `plan` (the CPU reference's
    gather form) is built on first use, so GPU layers never build it."""

    pairs: torch.Tensor  # [krot, K] int16
    theta: torch.Tensor  # [krot, K/2] float16
    channel_scales: torch.Tensor  # [1, K] float16
    _plan: reference.RotationPlan | None = field(default=None, repr=False)

    @classmethod
    def of(cls, t) -> Rotation:
        """The rotation of anything holding pairs / theta / channel_scales (ParoTensors, Mxfp4Tensors)."""
        return cls(t.pairs, t.theta, t.channel_scales)

    @property
    def plan(self) -> reference.RotationPlan:
        if self._plan is None:
            self._plan = reference.rotation_plan(self.pairs, self.theta, GROUP_SIZE, torch.float32)
        return self._plan

    @property
    def k(self) -> int:
        return int(self.pairs.shape[1])

    def same_as(self, other: Rotation) -> bool:
        return all(torch.equal(a, b) for a, b in ((self.pairs, other.pairs), (self.theta, other.theta),
                                                  (self.channel_scales, other.channel_scales)))


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
    config: KernelConfig = field(default_factory=KernelConfig)  # the knobs it was prepared under
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


def dedup_rotations(rotations: list[Rotation], sizes: list[int]) -> tuple[list[Rotation], list[Run]]:
    """Per-partition rotations and vLLM's partition sizes -> the distinct rotations and their runs
    (identical adjacent rotations merged)."""
    if len(rotations) != len(sizes):
        raise ValueError(f"radiance: {len(rotations)} rotations for {len(sizes)} partitions")
    distinct: list[Rotation] = []
    runs: list[Run] = []
    n0 = 0
    for rot, size in zip(rotations, sizes):
        if distinct and distinct[-1].same_as(rot):
            last = runs[-1]
            runs[-1] = Run(last.n0, n0 + size, last.rotation)
        else:
            distinct.append(rot)
            runs.append(Run(n0, n0 + size, len(distinct) - 1))
        n0 += size
    return distinct, runs


def single_run(n: int) -> list[Run]:
    return [Run(0, n, 0)]


def kernel_bounds(what: str, runs: list[Run], rotations: list[Rotation], n: int, k: int, align: int) -> tuple[int, int]:
    """The first output column of rotated copies 1 and 2 (NO_COLUMN where absent), the form the
    GPU GEMMs select their copy by, after checking that the runs tile [0, n) one per rotation
    and that no GEMM column block (`align`) straddles two rotations."""
    desc = [(r.n0, r.n1, r.rotation) for r in runs]
    if not 1 <= len(rotations) <= MAX_ROTATIONS or len(runs) != len(rotations):
        raise ValueError(f"{what}: {len(rotations)} distinct rotations over runs {desc}; "
                         f"the GEMM takes 1..{MAX_ROTATIONS} rotations, one run each")
    if [r.rotation for r in runs] != list(range(len(runs))) or runs[0].n0 != 0 or runs[-1].n1 != n \
            or any(a.n1 != b.n0 or a.n0 >= a.n1 for a, b in zip(runs, runs[1:])):
        raise ValueError(f"{what}: runs {desc} must cover the {n} output columns in order, run i reading rotation i")
    for b in (r.n0 for r in runs[1:]):
        if b % align:
            raise ValueError(f"{what}: partition boundary {b} must be a multiple of {align} "
                             "(a GEMM n-block must not straddle two rotations)")
    for i, rot in enumerate(rotations):
        if rot.k != k:
            raise ValueError(f"{what}: rotation {i} has K={rot.k}, the weight K={k}")
    bounds = [r.n0 for r in runs[1:]] + [NO_COLUMN, NO_COLUMN]
    return bounds[0], bounds[1]


def rotate_all(prep: PreparedLinear, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One rotated copy of x per distinct rotation (the tuple the GEMM takes)."""
    return tuple(reference.apply_rotation(x, r.plan, r.channel_scales) for r in prep.rotations)


def check_copies(what: str, parts: int, k: int, copies) -> None:
    """The partition-count guard every platform applies first: the rotated activations (a [P, M, K]
    stack, or a tuple of P [M, K] copies) must match the layer's P distinct rotations exactly. On a
    GPU a short stack makes the GEMM, which picks a copy by column block, read past the activation
    buffer (a hang, not a fault)."""
    if isinstance(copies, torch.Tensor):
        ok = copies.dim() == 3 and copies.shape[0] == parts and copies.shape[2] == k
    else:
        ok = len(copies) == parts and all(c.dim() == 2 and c.shape[1] == k for c in copies)
    if not ok:
        shapes = [list(copies.shape)] if isinstance(copies, torch.Tensor) else [list(c.shape) for c in copies]
        raise ValueError(f"{what}: rotated activations {shapes} do not match the layer's {parts} distinct "
                         f"rotations of K={k} ([P, M, K] stack or P copies [M, K])")


def check_partitions(prep: PreparedLinear, xs: tuple[torch.Tensor, ...]) -> None:
    """check_copies for a PreparedLinear (the CPU paths)."""
    check_copies(f"radiance {prep.method}", len(prep.rotations), prep.in_features, xs)
