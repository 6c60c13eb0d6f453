"""One linear under ParoQuant optimization, in the paroquant format's own terms.

The layer computes (activations stay unquantized while learning)

    y = rotate(x * cs) @ fake_quant(rotate(W / cs))^T + b

with `rotate` the reference sweep (kernels/reference.py, as one 128x128 matrix per group, which
autograd differentiates in theta) and `cs` the format's pre-inverted channel scales. That is
exactly what a served checkpoint computes, so nothing is converted at export but the rounding of
theta, cs and the quantizer's scales to float16 (which stage 2 already trains with).

Stage 1 learns theta (fixed pairs) and log(1/cs); the int4 quantizer follows the rotated weight
(per-group min/max each step). Stage 2 freezes the rotation at its float16 values and learns the
rotated weight itself and the quantizer's per-group scale and zero. Rounding and clamping pass
gradients straight through (STE), as in ParoQuant / EfficientQAT.
"""

from __future__ import annotations

import zlib

import torch
from torch import nn

from radiance.kernels import reference as R
from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors, pack_awq

QMAX = 15.0  # uint4


def _ste(x: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """`value` forward, the gradient of `x` backward."""
    return x + (value - x).detach()


def fake_quant(g: torch.Tensor, scale: torch.Tensor, zero: torch.Tensor) -> torch.Tensor:
    """g [N, G, 128] -> dequant(quant(g)) with per-group scale / zero [N, G] (STE everywhere)."""
    s, z = scale.unsqueeze(-1), _ste(zero, zero.round().clamp(0, QMAX)).unsqueeze(-1)
    codes = _ste(g / s, (g / s).round()) + z
    return (_ste(codes, codes.clamp(0, QMAX)) - z) * s


def minmax_quantizer(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Asymmetric per-group scale and (real-valued) zero covering [min, max] of g [N, G, 128]."""
    lo, hi = g.amin(-1), g.amax(-1)
    span = hi - lo
    scale = _ste(span, span.clamp(min=1e-5)) / QMAX
    return scale, -lo / scale


def _f16(x: torch.Tensor) -> torch.Tensor:
    return _ste(x, x.half().float())


def disjoint_pairs(k: int, krot: int, gen: torch.Generator) -> torch.Tensor:
    """[krot, K] int16: per group, krot perfect matchings of its 128 channels with no pair repeated.

    The rounds of a round-robin tournament (circle method) on 128 players are 127 edge-disjoint
    perfect matchings; each group takes krot distinct rounds under its own random relabeling."""
    n = GROUP_SIZE
    rounds = []
    for r in range(n - 1):
        ring = [n - 1] + [(r + t) % (n - 1) for t in range(n - 1)]
        rounds.append([ring[t] for p in range(n // 2) for t in (p, n - 1 - p)])
    table = torch.tensor(rounds, dtype=torch.int64)  # [127, 128]: pair p = (row[2p], row[2p+1])
    layers = []
    for _ in range(k // n):
        label = torch.randperm(n, generator=gen)
        pick = torch.randperm(n - 1, generator=gen)[:krot]
        layers.append(label[table[pick]])  # [krot, 128]
    return torch.cat(layers, dim=1).to(torch.int16)


def pair_generator(seed: int, prefix: str) -> torch.Generator:
    # torch seeds its CPU generator from 32 bits only, so mix the seed in within them
    return torch.Generator().manual_seed((zlib.crc32(prefix.encode()) + seed * 0x9E3779B1) % 2**32)


class LearnedLinear(nn.Module):
    def __init__(self, linear: nn.Linear, pairs: torch.Tensor):
        super().__init__()
        n, k = linear.weight.shape
        dev = linear.weight.device
        self.register_buffer("weight", linear.weight.detach().float().clone())
        self.register_buffer("bias", None if linear.bias is None else linear.bias.detach().float().clone())
        self.register_buffer("pairs", pairs.to(dev))
        self.theta = nn.Parameter(torch.zeros(pairs.shape[0], k // 2, device=dev))
        self.log_inv_cs = nn.Parameter(torch.zeros(k, device=dev))  # cs = exp(-log_inv_cs), weights / cs
        self.register_buffer("frozen_cs", None)  # stage 2: cs as stored (float16 values)
        self.w_rot: nn.Parameter | None = None  # stage 2
        self.q_scale: nn.Parameter | None = None
        self.q_zero: nn.Parameter | None = None
        self.shape = (n, k)

    # ---------------------------------------------------------------- the two stages
    def stage1_params(self) -> list[nn.Parameter]:
        return [self.theta, self.log_inv_cs]

    def stage2_params(self) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
        """(weights, quantizer scales + zeros); freezes the rotation at its float16 values."""
        if self.w_rot is None:
            with torch.no_grad():
                self.theta.copy_(self.theta.half().float())
                self.frozen_cs = self.channel_scales().half().float()
                g = self._rotated_weight()
                scale, zero = minmax_quantizer(g)
            self.theta.requires_grad_(False)
            self.log_inv_cs.requires_grad_(False)
            self.w_rot = nn.Parameter(g)
            self.q_scale = nn.Parameter(scale)
            self.q_zero = nn.Parameter(zero)
        return [self.w_rot], [self.q_scale, self.q_zero]

    # ---------------------------------------------------------------- math
    def channel_scales(self) -> torch.Tensor:
        return torch.exp(-self.log_inv_cs) if self.frozen_cs is None else self.frozen_cs

    def _mats(self) -> torch.Tensor:
        return R.group_rotation_matrices(R.rotation_plan(self.pairs, self.theta))

    def _rotated_weight(self, mats: torch.Tensor | None = None) -> torch.Tensor:
        n, k = self.shape
        w = R.apply_group_matrices(self.weight / self.channel_scales(), self._mats() if mats is None else mats)
        return w.view(n, k // GROUP_SIZE, GROUP_SIZE)

    def quantized_weight(self, mats: torch.Tensor | None = None) -> torch.Tensor:
        """The dequantized rotated weight [N, K] the layer computes with."""
        if self.w_rot is None:
            g = self._rotated_weight(mats)
            wq = fake_quant(g, *minmax_quantizer(g))
        else:
            wq = fake_quant(self.w_rot, _f16(self.q_scale.clamp(min=1e-5)), self.q_zero)
        return wq.reshape(self.shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mats = self._mats()
        xr = R.apply_group_matrices(x * self.channel_scales(), mats)
        y = xr @ self.quantized_weight(mats).t()
        return y if self.bias is None else y + self.bias

    # ---------------------------------------------------------------- export
    @torch.no_grad()
    def packed(self) -> ParoTensors:
        """The paroquant tensors (after stage 2): exactly the forward's numbers, stored."""
        if self.w_rot is None:
            self.stage2_params()
        n, k = self.shape
        scale = self.q_scale.clamp(min=1e-5).half()
        zero = self.q_zero.round().clamp(0, QMAX)
        codes = ((self.w_rot / scale.float().unsqueeze(-1)).round() + zero.unsqueeze(-1)).clamp(0, QMAX)
        return ParoTensors(
            qweight=pack_awq(codes.reshape(n, k).t().to(torch.uint8)).cpu(),
            qzeros=pack_awq(zero.t().to(torch.uint8)).cpu(),
            scales=scale.t().contiguous().cpu(),
            pairs=self.pairs.cpu(),
            theta=self.theta.half().cpu(),
            channel_scales=self.channel_scales().half().reshape(1, k).cpu(),
        )
