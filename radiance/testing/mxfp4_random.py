"""Random paroquant_mxfp4 layers and their fp32 reference, shared by the mxfp4 kernel tests (interpreter,
GPU, offline compile) and benchmarks: uniform e2m1 codes, e8m0 exponents around a real checkpoint's
(2^-7 blocks, +-3 binades), paroquant's random rotations (paro_random)."""

from __future__ import annotations

import math

import torch

from radiance.kernels import reference
from radiance.kernels.formats.paroquant import GROUP_SIZE
from radiance.kernels.formats.paroquant_mxfp4 import BLOCK, Mxfp4Tensors, pack_e2m1
from radiance.kernels.linear import Rotation, Run
from radiance.testing.paro_random import runs_of


def random_layer(n: int, k: int, gen: torch.Generator, krot: int = 8, e_mid: int = 120, e_spread: int = 3) -> Mxfp4Tensors:
    """On gen's device. Exponent bytes uniform in e_mid +- e_spread."""
    dev = gen.device
    g = k // GROUP_SIZE
    codes = torch.randint(0, 16, (n, k), generator=gen, device=dev, dtype=torch.uint8)
    scale = torch.randint(e_mid - e_spread, e_mid + e_spread + 1, (n, k // BLOCK), generator=gen, device=dev)
    pairs = torch.argsort(torch.rand(krot * g, GROUP_SIZE, generator=gen, device=dev), dim=-1).view(krot, k)
    theta = ((torch.rand(krot, k // 2, generator=gen, device=dev) * 2 - 1) * math.pi).to(torch.float16)
    cs = (torch.rand(1, k, generator=gen, device=dev) + 0.5).to(torch.float16)
    return Mxfp4Tensors(pack_e2m1(codes), scale.to(torch.uint8), pairs.to(torch.int16), theta, cs)


def identity_layer(codes: torch.Tensor, scale: torch.Tensor) -> Mxfp4Tensors:
    """codes [N, K] u8 and e8m0 bytes [N, K/32] under the identity rotation (one layer, unit scales)."""
    n, k = codes.shape
    pairs = torch.arange(GROUP_SIZE, dtype=torch.int16, device=codes.device).repeat(1, k // GROUP_SIZE)
    return Mxfp4Tensors(pack_e2m1(codes), scale.to(torch.uint8), pairs,
                        torch.zeros(1, k // 2, dtype=torch.float16, device=codes.device),
                        torch.ones(1, k, dtype=torch.float16, device=codes.device))


def merged(parts: list[Mxfp4Tensors]) -> tuple[torch.Tensor, torch.Tensor, list[Rotation], list[Run]]:
    """P layers sharing K -> (weight, weight_scale, rotations, runs) for mxfp4_ops.prepare."""
    return (torch.cat([t.weight for t in parts]), torch.cat([t.weight_scale for t in parts]),
            [Rotation.of(t) for t in parts], runs_of([t.out_features for t in parts]))


def reference_merged(x: torch.Tensor, parts: list[Mxfp4Tensors], act: str | None = None) -> torch.Tensor:
    """fp32 reference of a merged linear, each partition's reference.paroquant_mxfp4_linear side by
    side; act="fp8_group": the rotated activations fake-quantized as the W4A8 kernel sees them."""
    if act is None:
        return torch.cat([reference.paroquant_mxfp4_linear(x.float(), t) for t in parts], dim=1)
    outs = []
    for t in parts:
        xr = reference.fake_quant(reference.rotate(x.float(), t.pairs, t.theta, t.channel_scales), act)
        outs.append(xr @ reference.dequant_mxfp4(t.weight, t.weight_scale).t())
    return torch.cat(outs, dim=1)
