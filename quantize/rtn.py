"""Round-to-nearest quantizers for one dense weight W [N, K] (the math only; packing is in formats)."""

from __future__ import annotations

import math

import torch

from radiance.kernels.formats import paroquant_mxfp4 as mx
from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors, pack_awq
from radiance.kernels.formats.pq2 import Pq2Tensors, pack_ternary
from radiance.kernels.reference import apply_group_matrices, group_rotation_matrices, rotation_plan


def _groups(w: torch.Tensor, group_size: int) -> torch.Tensor:
    n, k = w.shape
    if k % group_size:
        raise ValueError(f"in_features {k} is not a multiple of group size {group_size}")
    return w.to(torch.float32).view(n, k // group_size, group_size)


def int4_asym(w: torch.Tensor, group_size: int = GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Asymmetric uint4 RTN per group -> (codes [N, K] u8, zeros [N, G] u8, scales [N, G] f16).

    The scale is rounded to fp16 before the codes are chosen, so codes are nearest for the stored scale.
    """
    g = _groups(w, group_size)
    lo = g.amin(-1).clamp_(max=0.0)
    hi = g.amax(-1).clamp_(min=0.0)
    scales = ((hi - lo) / 15.0).clamp_(min=1e-5).to(torch.float16)
    s = scales.to(torch.float32)
    zeros = torch.round(-lo / s).clamp_(0, 15)
    codes = (g / s.unsqueeze(-1)).round_().add_(zeros.unsqueeze(-1)).clamp_(0, 15)
    return codes.reshape(w.shape).to(torch.uint8), zeros.to(torch.uint8), scales


def ternary_absmean(w: torch.Tensor, group_size: int = GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """Ternary RTN with an absmean scale per group -> (codes [N, K] u8 in 0..2, scales [N, G] f16)."""
    g = _groups(w, group_size)
    scales = g.abs().mean(-1).clamp(min=1e-8).to(torch.float16)
    s = scales.to(torch.float32)
    codes = torch.round(g / s.unsqueeze(-1)).clamp(-1, 1) + 1
    return codes.reshape(w.shape).to(torch.uint8), scales


def mxfp4_ocp(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """OCP MXFP4 RTN per 32 along K -> (e2m1 codes [N, K] u8, e8m0 scales [N, K/32] u8).

    Shared exponent floor(log2(amax)) - 2 (OCP's rule, as AMD's checkpoints: e2m1's largest
    exponent is 2, so a block maximum in [6, 8) x 2^e clips to 6); elements round to the nearest
    e2m1 value, ties to the even code."""
    g = _groups(w, mx.BLOCK)
    amax = g.abs().amax(-1)
    e = torch.where(amax > 0, torch.floor(torch.log2(amax.clamp(min=1e-38))) - 2, torch.full_like(amax, -mx.E8M0_BIAS))
    e = e.clamp(-mx.E8M0_BIAS, mx.E8M0_BIAS)
    v = (g / torch.exp2(e).unsqueeze(-1)).abs()
    grid = torch.tensor(mx.E2M1, device=w.device)
    mids = (grid[1:] + grid[:-1]) / 2
    idx = torch.bucketize(v, mids)  # a value on a midpoint goes down here ...
    tie = (idx < len(mids)) & (v == mids[idx.clamp(max=len(mids) - 1)])
    idx = torch.where(tie & (idx % 2 == 1), idx + 1, idx)  # ... and up where the lower code is odd
    codes = torch.where((g < 0) & (idx > 0), idx + 8, idx)
    return codes.reshape(w.shape).to(torch.uint8), (e + mx.E8M0_BIAS).to(torch.uint8)


def random_rotation(k: int, krot: int, gen: torch.Generator, group_size: int = GROUP_SIZE):
    """Random disjoint pairs per group (a random permutation read two by two) and random angles."""
    groups = k // group_size
    perms = torch.argsort(torch.rand(krot * groups, group_size, generator=gen), dim=-1)
    pairs = perms.view(krot, k).to(torch.int16)
    theta = ((torch.rand(krot, k // 2, generator=gen) * 2 - 1) * math.pi).to(torch.float16)
    return pairs, theta


def identity_rotation(k: int, krot: int):
    pairs = torch.arange(GROUP_SIZE, dtype=torch.int16).repeat(krot, k // GROUP_SIZE)
    return pairs, torch.zeros(krot, k // 2, dtype=torch.float16)


def paroquant_linear_tensors(
    w: torch.Tensor, pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor | None = None
) -> ParoTensors:
    """Quantize W so that ((x * cs) R^T) dequant(Q)^T ~= x W^T: RTN of rotate(W / cs) row-wise."""
    n, k = w.shape
    cs = torch.ones(1, k, dtype=torch.float16, device=w.device) if channel_scales is None else channel_scales.to(torch.float16)
    # one batched matmul per linear instead of krot gathers: the quantizer must stay fast on 2 cores
    mats = group_rotation_matrices(rotation_plan(pairs, theta))
    w_rot = apply_group_matrices(w.to(torch.float32) / cs.to(torch.float32), mats)
    codes, zeros, scales = int4_asym(w_rot)
    return ParoTensors(
        qweight=pack_awq(codes.t()),
        qzeros=pack_awq(zeros.t()),
        scales=scales.t().contiguous(),
        pairs=pairs,
        theta=theta,
        channel_scales=cs.reshape(1, k),
    )


def paroquant_mxfp4_linear_tensors(
    w: torch.Tensor, pairs: torch.Tensor, theta: torch.Tensor, channel_scales: torch.Tensor | None = None
) -> mx.Mxfp4Tensors:
    """MXFP4 of rotate(W / cs): the paroquant rotation, the weight on the MXFP4 grid."""
    n, k = w.shape
    cs = torch.ones(1, k, dtype=torch.float16, device=w.device) if channel_scales is None else channel_scales.to(torch.float16)
    mats = group_rotation_matrices(rotation_plan(pairs, theta))
    codes, scales = mxfp4_ocp(apply_group_matrices(w.to(torch.float32) / cs.to(torch.float32), mats))
    return mx.Mxfp4Tensors(mx.pack_e2m1(codes), scales, pairs, theta, cs.reshape(1, k))


def pq2_linear_tensors(w: torch.Tensor) -> Pq2Tensors:
    codes, scales = ternary_absmean(w)
    return Pq2Tensors(qweight=pack_ternary(codes), scales=scales)
