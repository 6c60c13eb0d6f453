"""What the HIP kernels compute, written in torch from the prepared layout (CPU or any device).

Not a compute path: it reads `PreparedParo` exactly the way the kernels do (record decoding, nibble
order, the {scale, d} pairs, the boundary select, the zero point outside the matmul), so CPU tests
check `layout.prepare` against kernels/reference.py without a GPU, and the device tests can tell a
layout bug from a kernel bug.
"""

from __future__ import annotations

import torch

from radiance.kernels.hip.layout import PreparedParo, rotation_of_columns, scale_and_d, weight_codes

GROUP = 128


def e4m3_codes(t: torch.Tensor) -> torch.Tensor:
    """float32 -> e4m3 bytes, saturating, NaN -> 0, -0 -> +0 (the kernels' encoder)."""
    q = t.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8).clone()
    q[torch.isnan(t)] = 0
    q[q == 0x80] = 0
    return q


def e4m3_values(q: torch.Tensor) -> torch.Tensor:
    return q.view(torch.float8_e4m3fn).to(torch.float32)


def rotate(x: torch.Tensor, prep: PreparedParo, r: int) -> torch.Tensor:
    """Rotation r from its records: scale, then layers; each product rounded on its own."""
    k = prep.in_features
    y = x.to(torch.float32) * prep.cs[r]
    q = torch.arange(k // 2, device=x.device)
    base = (q // 64) * GROUP
    for layer in range(prep.krot):
        rec = prep.rec[r, layer]
        i = base + (rec[:, 0] & 0xFF).to(torch.int64)
        j = base + (rec[:, 0] >> 8).to(torch.int64)
        c, s = rec[:, 1].view(torch.float32), rec[:, 2].view(torch.float32)
        xi, xj = y[:, i], y[:, j]
        out = torch.empty_like(y)
        out[:, i] = c * xi + s * xj
        out[:, j] = c * xj - s * xi
        y = out
    return y


def rotate_quant(x: torch.Tensor, prep: PreparedParo, per_token: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """-> (a [R, M, K] uint8, asr [R, M, G, 2] f32 {scale, rowsum of decoded codes})."""
    m, k = x.shape
    g = k // GROUP
    codes, asr = [], []
    for r in range(prep.rotations):
        y = rotate(x, prep, r).view(m, g, GROUP)
        amax = y.abs().amax(-1, keepdim=True)
        if per_token:
            amax = amax.amax(-2, keepdim=True).expand(m, g, 1)
        a = amax / 448.0
        q = e4m3_codes(y / torch.where(a > 0, a, torch.ones_like(a)))
        codes.append(q.view(m, k))
        asr.append(torch.stack([a.squeeze(-1), e4m3_values(q).sum(-1)], dim=-1))
    return torch.stack(codes), torch.stack(asr)


def gemm(a: torch.Tensor, asr: torch.Tensor, prep: PreparedParo) -> torch.Tensor:
    """acc += asg * (sc * sum(a * (c - 8)) - (sc * d) * rowsum) per group -> [M, N] float32."""
    _, m, k = a.shape
    g = k // GROUP
    w8 = weight_codes(prep).to(a.device).to(torch.float32).view(-1, g, GROUP) - 8  # [N, G, 128]
    sc, d = (t.to(a.device) for t in scale_and_d(prep))  # [G, N]
    rot = rotation_of_columns(prep).to(a.device)
    out = torch.zeros(m, prep.out_features, dtype=torch.float32, device=a.device)
    for r in range(prep.rotations):
        cols = (rot == r).nonzero().squeeze(-1)
        av = e4m3_values(a[r]).view(m, g, GROUP)
        wm = torch.einsum("mgk,ngk->gmn", av, w8[cols])  # the WMMA part
        asg, rs = asr[r, :, :, 0].t().unsqueeze(-1), asr[r, :, :, 1].t().unsqueeze(-1)  # [G, M, 1]
        s, zs = sc[:, cols].unsqueeze(1), (sc * d)[:, cols].unsqueeze(1)  # [G, 1, n]
        out[:, cols] = (asg * (s * wm - zs * rs)).sum(0)
    return out
