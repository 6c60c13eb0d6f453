"""Random paroquant layers and the numerics checks the gpu tests, the interpreter tests and the
benchmark share (random permutation pairs per group, random angles, asymmetric zeros 2..14)."""

from __future__ import annotations

import math

import torch

from radiance.kernels import reference
from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors, pack_awq


def random_layer(n: int, k: int, gen: torch.Generator, krot: int = 8) -> ParoTensors:
    g = k // GROUP_SIZE
    codes = torch.randint(0, 16, (k, n), generator=gen)
    zeros = torch.randint(2, 15, (g, n), generator=gen)
    scales = (torch.rand(g, n, generator=gen) * 0.02 + 0.002).to(torch.float16)
    pairs = torch.argsort(torch.rand(krot * g, GROUP_SIZE, generator=gen), dim=-1).view(krot, k).to(torch.int16)
    theta = ((torch.rand(krot, k // 2, generator=gen) * 2 - 1) * math.pi).to(torch.float16)
    cs = (torch.rand(1, k, generator=gen) + 0.5).to(torch.float16)
    return ParoTensors(pack_awq(codes), pack_awq(zeros), scales, pairs, theta, cs)


def rotation_of(t: ParoTensors):
    return (t.pairs, t.theta, t.channel_scales)


def merged(parts: list[ParoTensors]) -> tuple[list, list, list, list, list[int]]:
    """P layers sharing K -> (qweights, qzeros, scales, rotations, boundaries) for paro_ops.prepare."""
    bounds, n0 = [], 0
    for t in parts[:-1]:
        n0 += t.out_features
        bounds.append(n0)
    return ([t.qweight for t in parts], [t.qzeros for t in parts], [t.scales for t in parts],
            [rotation_of(t) for t in parts], bounds)


def reference_merged(x: torch.Tensor, parts: list[ParoTensors], act: str | None) -> torch.Tensor:
    """fp32 reference of a merged linear: each partition's reference.paroquant_linear, side by side."""
    return torch.cat([reference.paroquant_linear(x.float(), t, act=act) for t in parts], dim=1)


def rel(y: torch.Tensor, ref: torch.Tensor) -> float:
    y, ref = y.double(), ref.double()
    if not torch.isfinite(y).all():
        return math.inf
    return float((y - ref).norm() / ref.norm())
