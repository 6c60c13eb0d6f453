"""Exact torch numerics: the CPU compute path and the judge of every kernel.

Imports only torch (and the format modules). Works on CPU and CUDA, in float32 and float64;
bf16/fp16 inputs are computed in float32 and returned in their own dtype.

paroquant (docs/formats.md; convention checked against z-lab's paroquant code)::

    y = x W^T = ((x * channel_scales) R^T) dequant(Q)^T

`rotate` multiplies the activations by `channel_scales` (stored pre-inverted), then applies the
Givens layers forward, r = 0 .. krot-1. In layer r, group g, pair p (0..63):

    i = g*128 + pairs[r, g*128 + 2p],  j = g*128 + pairs[r, g*128 + 2p + 1]
    c, s = cos(theta[r, g*64 + p]), sin(theta[r, g*64 + p])   (in the compute dtype)
    x_i' = c*x_i + s*x_j
    x_j' = c*x_j - s*x_i

A layer's 64 pairs partition its group, so the pairs of one layer commute and are applied at once.
To quantize a dense W so that the identity holds, quantize `rotate(W / channel_scales)` row-wise
(the same forward sweep applied to the rows of W with the scales inverted).

paroquant_mxfp4: the same rotation, the weight on an MXFP4 grid (kernels/formats/paroquant_mxfp4.py)::

    y = ((x * channel_scales) R^T) W^T,  W[n, k] = E2M1[code[n, k]] * 2^(e8m0[n, k/32] - 127)

pq2 (ternary)::

    y[m, n] = sum_g a[m, g] * d[n, g] * (dot(codes[n, g, :], q[m, g, :]) - sum(q[m, g, :]))

with codes 0/1/2 (= -1/0/+1 plus one), q the int8 per-128-group activation codes and a their
scales (`quant_int8_group`). Integer parts are exact (|dot| <= 2*127*128 < 2^24).

Activation quantizers (fp32 arithmetic, what the kernels must reproduce):
- int8 per group:   a = amax/127, q = clamp(round_half_even(x / a), -127, 127); a = 0 -> q = 0
- fp8 e4m3 per group / per token: a = amax/448, q = e4m3(clamp(x / a, -448, 448)) (RNE); a = 0 -> q = 0
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors, unpack_awq
from radiance.kernels.formats.paroquant_mxfp4 import BLOCK, E2M1, E8M0_BIAS, Mxfp4Tensors, unpack_e2m1
from radiance.kernels.formats.pq2 import Pq2Tensors, unpack_ternary

INT8_MAX = 127.0
FP8_E4M3_MAX = 448.0


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


# ----------------------------------------------------------------------------- paroquant
def dequant_paroquant(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
    group_size: int = GROUP_SIZE, dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """AWQ-packed asymmetric int4 -> dense W [N, K] in `dtype`: (q - z) * s per (group, column)."""
    q = unpack_awq(qweight).to(dtype)  # [K, N]
    z = unpack_awq(qzeros).to(dtype).repeat_interleave(group_size, dim=0)
    s = scales.to(dtype).repeat_interleave(group_size, dim=0)
    return ((q - z) * s).t().contiguous()


@dataclass
class RotationPlan:
    """Pair indices and cos/sin per layer, precomputed once per linear (reuse it per call).

    `i[r, q]`, `j[r, q]` are the global channels of pair q (= g*64 + p) of layer r. `gathers` drive
    the sweep: gathers[0] brings x into layer 0's (i..., j...) order; gathers[r + 1] takes layer r's
    output, in that order, to layer r+1's order (the last one back to channel order)."""

    i: torch.Tensor  # [krot, K/2] int64
    j: torch.Tensor  # [krot, K/2] int64
    cos: torch.Tensor  # [krot, K/2]
    sin: torch.Tensor  # [krot, K/2]
    gathers: torch.Tensor  # [krot + 1, K] int64

    @property
    def krot(self) -> int:
        return int(self.i.shape[0])


def rotation_plan(
    pairs: torch.Tensor, theta: torch.Tensor, group_size: int = GROUP_SIZE, dtype: torch.dtype = torch.float32
) -> RotationPlan:
    krot, k = pairs.shape
    groups = k // group_size
    local = pairs.to(torch.int64).view(krot, groups, group_size)
    base = (torch.arange(groups, device=pairs.device) * group_size).view(1, groups, 1)
    gi = (local[:, :, 0::2] + base).reshape(krot, k // 2)
    gj = (local[:, :, 1::2] + base).reshape(krot, k // 2)
    perm = torch.cat([gi, gj], dim=1)  # [krot, K]: layer r's order
    inv = torch.argsort(perm, dim=1)  # channel -> position in layer r's order
    gathers = [perm[0]] + [inv[r][perm[r + 1]] for r in range(krot - 1)] + [inv[krot - 1]]
    th = theta.to(compute_dtype(dtype))
    return RotationPlan(i=gi, j=gj, cos=torch.cos(th), sin=torch.sin(th), gathers=torch.stack(gathers))


def apply_rotation(x: torch.Tensor, plan: RotationPlan, channel_scales: torch.Tensor | None = None) -> torch.Tensor:
    """The forward sweep on the last dim of x (in x's compute dtype); see the module docstring."""
    dt = compute_dtype(x.dtype)
    y = x.to(dt)
    if channel_scales is not None:
        y = y * channel_scales.reshape(-1).to(dt)
    half = plan.i.shape[1]
    y = y.index_select(-1, plan.gathers[0])
    for r in range(plan.krot):
        xi, xj = y[..., :half], y[..., half:]
        c, s = plan.cos[r].to(dt), plan.sin[r].to(dt)
        y = torch.cat([c * xi + s * xj, c * xj - s * xi], dim=-1).index_select(-1, plan.gathers[r + 1])
    return y


def group_rotation_matrices(plan: RotationPlan, group_size: int = GROUP_SIZE,
                            dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The sweep as one matrix per group, [G, 128, 128]: rotate(x) == x_g @ M[g] group by group.

    Built by sweeping the basis vectors, so it is the same rotation up to rounding; one batched
    matmul is far cheaper than krot gathers when many rows are rotated (weights, prefill)."""
    k = plan.i.shape[1] * 2
    basis = torch.eye(group_size, dtype=dtype, device=plan.i.device).repeat(1, k // group_size)
    swept = apply_rotation(basis, plan)  # [128, K]: row e is basis vector e of every group, rotated
    return swept.view(group_size, k // group_size, group_size).permute(1, 0, 2).contiguous()


def apply_group_matrices(x: torch.Tensor, mats: torch.Tensor) -> torch.Tensor:
    """x [..., K] times the per-group matrices of `group_rotation_matrices` (no channel scales)."""
    g, gs, _ = mats.shape
    y = torch.einsum("ngk,gkl->ngl", x.reshape(-1, g, gs).to(mats.dtype), mats)
    return y.reshape(x.shape)


def rotate(
    x: torch.Tensor, pairs: torch.Tensor, theta: torch.Tensor,
    channel_scales: torch.Tensor | None = None, group_size: int = GROUP_SIZE,
) -> torch.Tensor:
    """(x * channel_scales) R^T: scale, then Givens layers 0..krot-1. Result in x's compute dtype."""
    return apply_rotation(x, rotation_plan(pairs, theta, group_size, x.dtype), channel_scales)


def paroquant_linear(
    x: torch.Tensor, t: ParoTensors, bias: torch.Tensor | None = None,
    act: str | None = None, group_size: int = GROUP_SIZE,
) -> torch.Tensor:
    """y = ((x * cs) R^T) dequant(Q)^T + bias; `act` fake-quantizes the rotated activations
    ("int8_group", "fp8_group", "fp8_token"; None = none) the way a W4A8 kernel sees them."""
    dt = compute_dtype(x.dtype)
    xr = rotate(x, t.pairs, t.theta, t.channel_scales, group_size)
    xr = fake_quant(xr, act, group_size)
    w = dequant_paroquant(t.qweight, t.qzeros, t.scales, group_size, dt)
    y = xr @ w.t()
    if bias is not None:
        y = y + bias.to(dt)
    return y.to(x.dtype)


# ----------------------------------------------------------------------------- paroquant_mxfp4
def e2m1_values(dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """The 16 e2m1 codes' values: magnitudes E2M1, bit 3 the sign."""
    mag = torch.tensor(E2M1, dtype=dtype, device=device)
    return torch.cat((mag, -mag))


def dequant_mxfp4(weight: torch.Tensor, weight_scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """MXFP4 -> dense W [N, K] in `dtype`: e2m1 value x 2^(e8m0 - 127) per 32 along K (exact in fp32)."""
    codes = unpack_e2m1(weight).to(torch.int64)
    n, k = codes.shape
    vals = e2m1_values(dtype, weight.device)[codes].view(n, k // BLOCK, BLOCK)
    scale = torch.exp2(weight_scale.to(dtype) - E8M0_BIAS).unsqueeze(-1)
    return (vals * scale).view(n, k)


def paroquant_mxfp4_linear(x: torch.Tensor, t: Mxfp4Tensors, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y = ((x * cs) R^T) dequant_mxfp4(W)^T + bias."""
    dt = compute_dtype(x.dtype)
    xr = rotate(x, t.pairs, t.theta, t.channel_scales)
    y = xr @ dequant_mxfp4(t.weight, t.weight_scale, dt).t()
    if bias is not None:
        y = y + bias.to(dt)
    return y.to(x.dtype)


# ----------------------------------------------------------------------------- pq2
def dequant_pq2(
    qweight: torch.Tensor, scales: torch.Tensor, group_size: int = GROUP_SIZE, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Ternary codes -> dense W [N, K] in `dtype`: (code - 1) * d."""
    w = unpack_ternary(qweight).to(dtype) - 1
    return w * scales.to(dtype).repeat_interleave(group_size, dim=1)


def pq2_linear(
    x: torch.Tensor, t: Pq2Tensors, bias: torch.Tensor | None = None,
    act_quant: bool = True, group_size: int = GROUP_SIZE, chunk_rows: int = 256,
) -> torch.Tensor:
    """Ternary linear. act_quant=True: int8 per-group activations and the integer
    `dot(codes, q) - sum(q)` per group (the W2A8 kernels' numerics); False: x @ dequant(W)^T."""
    dt = compute_dtype(x.dtype)
    lead, k = x.shape[:-1], x.shape[-1]
    x2 = x.reshape(-1, k).to(dt)
    d = t.scales.to(dt)  # [N, G]
    if not act_quant:
        y = x2 @ dequant_pq2(t.qweight, t.scales, group_size, dt).t()
    else:
        n, groups = d.shape
        # float32 holds these integers exactly; float64 when the caller asked for it
        codes = unpack_ternary(t.qweight).to(dt).view(n, groups, group_size)
        outs = []
        for rows in x2.split(chunk_rows):
            q, a = quant_int8_group(rows, group_size)  # [m, K] int8, [m, G] f32
            qg = q.to(dt).view(-1, groups, group_size)
            dots = torch.einsum("mgk,ngk->gmn", qg, codes) - qg.sum(-1).t().unsqueeze(-1)
            outs.append(torch.einsum("gmn,mg,ng->mn", dots, a.to(dt), d))
        y = torch.cat(outs) if outs else x2.new_zeros(0, d.shape[0])
    if bias is not None:
        y = y + bias.to(dt)
    return y.reshape(*lead, -1).to(x.dtype)


# ----------------------------------------------------------------------------- activation quantizers
def _grouped(x: torch.Tensor, group_size: int) -> torch.Tensor:
    if x.shape[-1] % group_size:
        raise ValueError(f"last dim {x.shape[-1]} is not a multiple of group size {group_size}")
    return x.to(torch.float32).reshape(*x.shape[:-1], x.shape[-1] // group_size, group_size)


def div_rn(a: torch.Tensor, b: torch.Tensor | float) -> torch.Tensor:
    """The correctly rounded fp32 quotient on every device: computed in fp64, rounded once to fp32
    (53 >= 2*24 + 2 bits, so the double rounding is exact). torch's fp32 `/` on CUDA tensors
    disagreed with IEEE division (and so with the kernels' div_rn) on ~1 value in 2000 on the H200."""
    return (a.double() / (b.double() if isinstance(b, torch.Tensor) else b)).float()


def quant_int8_group(x: torch.Tensor, group_size: int = GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (q int8 like x, scale float32 [..., K/group]); x ~= q * scale per group."""
    g = _grouped(x, group_size)
    a = div_rn(g.abs().amax(-1), INT8_MAX)
    safe = torch.where(a > 0, a, torch.ones_like(a))
    q = torch.round(div_rn(g, safe.unsqueeze(-1))).clamp(-INT8_MAX, INT8_MAX)
    return q.to(torch.int8).reshape(x.shape), a


def _e4m3(scaled: torch.Tensor) -> torch.Tensor:
    return scaled.clamp(-FP8_E4M3_MAX, FP8_E4M3_MAX).to(torch.float8_e4m3fn)


def quant_fp8_e4m3_group(x: torch.Tensor, group_size: int = GROUP_SIZE) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (q float8_e4m3fn like x, scale float32 [..., K/group]); x ~= q * scale per group."""
    g = _grouped(x, group_size)
    a = div_rn(g.abs().amax(-1), FP8_E4M3_MAX)
    safe = torch.where(a > 0, a, torch.ones_like(a))
    return _e4m3(div_rn(g, safe.unsqueeze(-1))).reshape(x.shape), a


def quant_fp8_e4m3_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (q float8_e4m3fn like x, scale float32 [..., 1]); x ~= q * scale per row."""
    xf = x.to(torch.float32)
    a = div_rn(xf.abs().amax(-1, keepdim=True), FP8_E4M3_MAX)
    safe = torch.where(a > 0, a, torch.ones_like(a))
    return _e4m3(div_rn(xf, safe)), a


def dequant_group(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Inverse of the per-group / per-token quantizers: q * scale broadcast over each group."""
    group = q.shape[-1] // scale.shape[-1]
    qs = q.to(dtype).reshape(*q.shape[:-1], scale.shape[-1], group)
    return (qs * scale.to(dtype).unsqueeze(-1)).reshape(q.shape)


def fake_quant(x: torch.Tensor, act: str | None, group_size: int = GROUP_SIZE) -> torch.Tensor:
    """Quantize then dequantize activations (None -> unchanged)."""
    if act is None:
        return x
    quantizers = {
        "int8_group": lambda v: quant_int8_group(v, group_size),
        "fp8_group": lambda v: quant_fp8_e4m3_group(v, group_size),
        "fp8_token": quant_fp8_e4m3_token,
    }
    if act not in quantizers:
        raise ValueError(f"unknown activation quantizer {act!r}; use one of {sorted(quantizers)} or None")
    q, a = quantizers[act](x)
    return dequant_group(q, a, x.dtype)


# ----------------------------------------------------------------------------- what feeds a linear
def add_rms_norm(x: torch.Tensor, residual: torch.Tensor | None, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(normalized x, residual out): vLLM's rms_norm / fused_add_rms_norm IR ops. The sum is taken in
    fp32 and normalized unrounded; the residual out is that sum rounded to x's dtype; the
    normalized value is rounded to the weight's dtype before the weight multiplies it."""
    z = x.float() if residual is None else x.float() + residual.float()
    r = torch.rsqrt(z.pow(2).mean(dim=-1, keepdim=True) + eps)
    return ((z * r).to(weight.dtype) * weight).to(x.dtype), None if residual is None else z.to(x.dtype)


def silu_mul(gu: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gu = [gate | up] (vLLM's SiluAndMul, eager): silu in fp32 rounded to
    gu's dtype, then the product rounded once more."""
    d = gu.shape[-1] // 2
    return torch.nn.functional.silu(gu[..., :d].float()).to(gu.dtype) * gu[..., d:]
