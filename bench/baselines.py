"""Third-party baselines the kernel benchmarks time beside radiance: gemlite's A16Wn / A8Wn layers
(gemlite 0.6.0.post2, carried as a wheel; its shipped h100.json configs, autotune off)."""

from __future__ import annotations

import torch


def gemlite_layer(codes: torch.Tensor, scales: torch.Tensor, zeros: torch.Tensor, nbits: int, a8: bool):
    """A gemlite layer for codes [N, K] (uint8, 0..2^nbits-1), per-128-group scales and zero
    points [N, K/128]; a8 = int8 dynamic activations (A8Wn), else bf16 (A16Wn)."""
    from gemlite.helper import A8Wn_HQQ_INT_dynamic, A16Wn

    sc, zp = scales.to(torch.bfloat16), zeros.to(torch.bfloat16)
    if a8:
        return A8Wn_HQQ_INT_dynamic(device="cuda", dtype=torch.bfloat16, W_nbits=nbits).from_weights(codes, sc, zp)
    return A16Wn(device="cuda", dtype=torch.bfloat16).from_weights(codes, sc, zp, W_nbits=nbits, group_size=128)
