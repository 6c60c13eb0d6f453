"""Checkpoint tensors (the `paroquant_mxfp4` format) -> the layout the gfx1201 MXFP4 GEMM reads
(kernels/hip/pq_mxfp4_gemm.hip). The activation side is the int4 path's: the same rotation records
and channel scales (layout.rotation_records), read by the same `pq_rotate_quant` launch.

| tensor | shape | dtype | what |
|---|---|---|---|
| `wq` | wperm=1: [N/16, K/16, 32]; wperm=0: [N, K/8] | int32 | the e2m1 codes, packed exactly as layout.py packs int4 codes |
| `ex` | [K/128, N] | int32 | byte b = 32-block b of the group: the fold's o8 = 8 (d + 5), or (per_block) the e8m0 byte |
| `rsc` | [N] | float32 | the column's power of two 2^(r - 127) (per_block: 1) |
| `cs`, `rec` | as layout.py | | channel scales and Givens records of each distinct rotation |

The fold: a block's scale 2^(e - 127) = 2^(r - 127) * 2^d with r = (the column's largest exponent
among its nonzero blocks) - 6, so E2M1 * 2^d (d <= 6) is exact in e4m3 for d >= -5 and the kernel
stages it from a per-block table (pq_e2m1.h). A layer where some nonzero block falls below that
window takes the per-block kernels (`per_block`): the e2m1 value itself in e4m3, its block's
2^(e - 127) applied in f32 to each K = 32 partial. Both are exact; `per_block=None` picks the fold
wherever it holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from radiance.kernels.formats import FormatError
from radiance.kernels.formats.paroquant_mxfp4 import BLOCK, E8M0_BIAS, E8M0_NAN, Mxfp4Tensors, unpack_e2m1, validate
from radiance.kernels.hip.layout import (
    PreparedHip, from_fragment_order, pack_words, rotation_layout, to_fragment_order, unpack_words)
from radiance.kernels.linear import Rotation, Run, dedup_rotations

GROUP = 128
BLOCKS_PER_GROUP = GROUP // BLOCK
FOLD_TOP = 6  # r = largest exponent - FOLD_TOP: 6 * 2^6 = 384 is the largest folded operand
FOLD_DMIN = -5  # 0.5 * 2^-5 = 2^-6, e4m3's smallest normal (pq_e2m1.h's PQ_E2M1_DMIN)
O8_UNIT = 8 * (0 - FOLD_DMIN)  # o8 of d = 0 (pq_e2m1.h's PQ_E2M1_O8_UNIT)


@dataclass(kw_only=True)
class PreparedMxfp4(PreparedHip):
    wq: torch.Tensor
    ex: torch.Tensor
    rsc: torch.Tensor
    per_block: bool


def fold(weight: torch.Tensor, weight_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """-> (r [N] int64 the column's reference exponent, d [N, K/32] int64 = e - r, live [N, K/32] bool:
    blocks holding a nonzero value)."""
    n = int(weight.shape[0])
    codes = unpack_e2m1(weight).view(n, -1, BLOCK)
    live = (codes & 7).amax(-1) > 0
    e = weight_scale.to(torch.int64)
    top = torch.where(live, e, torch.full_like(e, -1)).amax(-1)  # -1: an all-zero column
    r = (top - FOLD_TOP).clamp(min=1)  # 2^(r - 127) stays an f32 normal
    return r, e - r[:, None], live


def fold_holds(weight: torch.Tensor, weight_scale: torch.Tensor) -> bool:
    """Whether every nonzero block sits inside its column's fold window (then the fold kernels run)."""
    _, d, live = fold(weight, weight_scale)
    return bool((d[live] >= FOLD_DMIN).all())


def _group_words(per_block_bytes: torch.Tensor) -> torch.Tensor:
    """[N, K/32] bytes -> [K/128, N] int32, byte b of a word = block b of its group."""
    n = int(per_block_bytes.shape[0])
    b = per_block_bytes.to(torch.int64).view(n, -1, BLOCKS_PER_GROUP)
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=b.device)
    words = (b << shifts).sum(-1)
    words = torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)
    return words.t().contiguous()


def prepare(parts: Sequence[Mxfp4Tensors], layer: str = "linear", wperm: bool = True,
            per_block: bool | None = None) -> PreparedMxfp4:
    """Repack one linear (or the partitions of a merged linear, in output order) for the kernels."""
    if not parts:
        raise FormatError(f"{layer}: no partitions to prepare")
    for i, t in enumerate(parts):
        validate(t, f"{layer}[{i}]" if len(parts) > 1 else layer)
    k, krot = parts[0].in_features, int(parts[0].pairs.shape[0])
    for i, t in enumerate(parts):
        if t.in_features != k or int(t.pairs.shape[0]) != krot:
            raise FormatError(f"{layer}[{i}]: partitions must share K={k} and krot={krot}, "
                              f"got K={t.in_features} krot={int(t.pairs.shape[0])}")
    distinct, runs = dedup_rotations([Rotation.of(t) for t in parts], [t.out_features for t in parts])
    return prepare_merged(torch.cat([t.weight for t in parts]), torch.cat([t.weight_scale for t in parts]),
                          distinct, runs, layer=layer, wperm=wperm, per_block=per_block)


def prepare_merged(weight: torch.Tensor, weight_scale: torch.Tensor, rotations: Sequence[Rotation],
                   runs: Sequence[Run], layer: str = "linear", wperm: bool = True,
                   per_block: bool | None = None) -> PreparedMxfp4:
    """weight [N, K/2] u8 / weight_scale [N, K/32] u8 concatenated along N, the distinct rotations
    in column order and their runs of output columns (kernels/linear.py).
    per_block: None = the fold wherever it holds; True forces the per-block kernels; False refuses
    a layer the fold cannot hold."""
    if weight.dim() != 2 or weight.dtype != torch.uint8 or weight_scale.dtype != torch.uint8:
        raise FormatError(f"{layer}: weight [N, K/2] and weight_scale [N, K/32] must be uint8, got "
                          f"{list(weight.shape)} {weight.dtype} and {list(weight_scale.shape)} {weight_scale.dtype}")
    n, k = int(weight.shape[0]), int(weight.shape[1]) * 2
    if tuple(weight_scale.shape) != (n, k // BLOCK):
        raise FormatError(f"{layer}: weight_scale must be [N, K/32] = [{n}, {k // BLOCK}], got {list(weight_scale.shape)}")
    rot = rotation_layout(rotations, runs, n, k, layer)
    if bool((weight_scale == E8M0_NAN).any()):
        raise FormatError(f"{layer}.weight_scale: holds the e8m0 NaN ({E8M0_NAN})")

    r, d, live = fold(weight, weight_scale)
    holds = bool((d[live] >= FOLD_DMIN).all())
    if per_block is False and not holds:
        low = int((d[live] < FOLD_DMIN).sum())
        raise FormatError(f"{layer}: {low} nonzero e8m0 blocks lie more than {FOLD_TOP - FOLD_DMIN} binades below "
                          "their column's largest, outside the fold's window; prepare with per_block=None "
                          "(the per-block kernels take them)")
    use_block = bool(per_block) or not holds
    if use_block:
        ex = _group_words(weight_scale)
        rsc = torch.ones(n, dtype=torch.float32, device=weight.device)
    else:
        ex = _group_words(torch.where(live, 8 * (d - FOLD_DMIN), torch.zeros_like(d)))
        rsc = torch.exp2((r - E8M0_BIAS).to(torch.float64)).to(torch.float32)
    words = pack_words(unpack_e2m1(weight))
    wq = to_fragment_order(words) if wperm else words
    return PreparedMxfp4(wq=wq.contiguous(), ex=ex, rsc=rsc.contiguous(), cs=rot.cs, rec=rot.rec, krot=rot.krot,
                         in_features=k, out_features=n, pb1=rot.pb1, pb2=rot.pb2, wperm=wperm,
                         per_block=use_block)


def weight_codes(prep: PreparedMxfp4) -> torch.Tensor:
    """The [N, K] e2m1 codes back out of `wq` (either layout)."""
    return unpack_words(from_fragment_order(prep.wq) if prep.wperm else prep.wq)


def block_bytes(prep: PreparedMxfp4) -> torch.Tensor:
    """`ex` -> [N, K/32] int64: per block its o8 (fold) or e8m0 byte (per_block)."""
    w = prep.ex.t().to(torch.int64) & 0xFFFFFFFF  # [N, K/128]
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=w.device)
    return ((w.unsqueeze(-1) >> shifts) & 0xFF).reshape(w.shape[0], -1)

