"""What the gfx1201 MXFP4 GEMM computes, written in torch from the prepared layout (CPU or any device).

Not a compute path: it reads `PreparedMxfp4` the way pq_mxfp4_gemm.hip does (the codes through the
int4 packing, the per-block e4m3 table with the fold's offset, `rsc`, the three scaling modes, the
boundary select), so CPU tests check mxfp4_layout.prepare against kernels/reference.py without a
GPU and the device tests can tell a layout bug from a kernel bug. The activations are the int4
path's: `emulate.rotate_quant` takes a PreparedMxfp4 as it takes a PreparedParo.
"""

from __future__ import annotations

import torch

from radiance.kernels.formats.paroquant_mxfp4 import BLOCK
from radiance.kernels.hip.emulate import GROUP, e4m3_values
from radiance.kernels.hip.layout import rotation_of_columns
from radiance.kernels.hip.mxfp4_layout import O8_UNIT, PreparedMxfp4, block_bytes, weight_codes

# pq_e2m1.h's table: the e4m3 bytes of E2M1[i] * 2^-5 (0 for i = 0), plus o8 in every nonzero entry
TABLE = torch.tensor([0x00, 0x08, 0x10, 0x14, 0x18, 0x1C, 0x20, 0x24], dtype=torch.int64)


def operand(prep: PreparedMxfp4) -> torch.Tensor:
    """[N, K] float32: the e4m3 weight operand the kernel stages (E2M1 * 2^d folded, or per_block
    the e2m1 value itself)."""
    codes = weight_codes(prep).to(torch.int64)  # [N, K]
    n, k = codes.shape
    o8 = torch.full((n, k // BLOCK), O8_UNIT, dtype=torch.int64) if prep.per_block else block_bytes(prep).cpu()
    mag = (codes & 7).cpu()
    byte = TABLE[mag] + torch.where(mag > 0, o8.repeat_interleave(BLOCK, dim=1), torch.zeros_like(mag))
    byte = byte | ((codes.cpu() & 8) << 4)
    return e4m3_values(byte.to(torch.uint8)).to(prep.wq.device)


def block_scales(prep: PreparedMxfp4) -> torch.Tensor:
    """[N, K/32] float32: per_block's 2^(e - 127) per block (e = 0 is 2^-127)."""
    e = block_bytes(prep)
    return torch.exp2((e - 127).to(torch.float64)).to(torch.float32)


def gemm(a: torch.Tensor, asr: torch.Tensor, prep: PreparedMxfp4, per_token: bool = False) -> torch.Tensor:
    """-> [M, N] float32, the kernel's sums: fold: rsc * sum_g asg * dot_g; fold with per-token scales
    (the prefill kernels' per_token): rsc * as * dot over all K; per_block: sum_b asg * 2^(e-127) * dot_b."""
    _, m, k = a.shape
    g = k // GROUP
    w = operand(prep).to(a.device)  # [N, K]
    rot = rotation_of_columns(prep).to(a.device)
    out = torch.zeros(m, prep.out_features, dtype=torch.float32, device=a.device)
    for r in range(prep.rotations):
        cols = (rot == r).nonzero().squeeze(-1)
        av = e4m3_values(a[r])  # [M, K]
        asg = asr[r, :, :, 0]  # [M, G]
        if prep.per_block:
            nb = k // BLOCK
            dots = torch.einsum("mbk,nbk->bmn", av.view(m, nb, BLOCK), w[cols].view(-1, nb, BLOCK))
            s_act = asg.repeat_interleave(GROUP // BLOCK, dim=1).t().unsqueeze(-1)  # [K/32, M, 1]
            s_blk = block_scales(prep).to(a.device)[cols].t().unsqueeze(1)  # [K/32, 1, n]
            out[:, cols] = (s_act * s_blk * dots).sum(0)
        elif per_token:
            out[:, cols] = (av @ w[cols].t()) * asg[:, :1] * prep.rsc.to(a.device)[cols]
        else:
            dots = torch.einsum("mgk,ngk->gmn", av.view(m, g, GROUP), w[cols].view(-1, g, GROUP))
            out[:, cols] = (asg.t().unsqueeze(-1) * dots).sum(0) * prep.rsc.to(a.device)[cols]
    return out
