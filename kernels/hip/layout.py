"""Checkpoint tensors (the z-lab `paroquant` format) -> the layout the HIP kernels read.

One linear, or a merged linear of several partitions (qkv, gate_up), becomes one `PreparedParo`:

| tensor | shape | dtype | what |
|---|---|---|---|
| `wq` | wperm=1: [N/16, K/16, 32]; wperm=0: [N, K/8] | int32 | uint4 codes; byte b of a word holds k offset b (low nibble) and b+4 (high nibble). wperm=1 is the WMMA B fragment: lane l of (n-tile nt, k-step ks) holds column 16nt + l%16, k = 16ks + 8(l/16) + 0..7 |
| `sz` | [K/128, N] | int32 | {f16 scale (low half), f16 d = zero - 8 (high half)} |
| `cs` | [R, K] | float32 | channel scales of each distinct rotation (multiply) |
| `rec` | [R, krot, K/2, 4] | int32 | per pair {i | j << 8 (local to the 128-group), f32 cos, f32 sin, 0} |

R <= 3 distinct rotations; adjacent partitions with identical rotations share one (qwen's q/k/v of
`in_proj_qkv`). Columns [0, pb1) use rotation 0, [pb1, pb2) rotation 1, the rest rotation 2.
cos/sin are computed as kernels/reference.py computes them (float32 torch.cos/sin of the f16 angle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from radiance.kernels.formats import FormatError
from radiance.kernels.formats.paroquant import ParoTensors, unpack_awq, validate
from radiance.kernels.hip import DECODE_MAX_ROWS
from radiance.kernels.linear import Rotation, Run, dedup_rotations, kernel_bounds
# the prefill wave tile is 32 columns; a boundary inside one would mix two rotations
BOUNDARY_MULTIPLE = 32


@dataclass(kw_only=True)
class PreparedHip:
    """What every HIP GEMM reads besides its weights: the rotations (`rotation_layout`) and the shape."""

    cs: torch.Tensor
    rec: torch.Tensor
    krot: int
    in_features: int
    out_features: int
    pb1: int
    pb2: int
    wperm: bool
    decode_rows: int = DECODE_MAX_ROWS  # M <= this: the decode kernel (the plan's: kernels/hip/kernels.py)

    @property
    def rotations(self) -> int:
        return int(self.cs.shape[0])


@dataclass(kw_only=True)
class PreparedParo(PreparedHip):
    wq: torch.Tensor
    sz: torch.Tensor


def pack_words(codes_nk: torch.Tensor) -> torch.Tensor:
    """uint4 codes [N, K] -> [N, K/8] int32 words (byte b: k offset b low nibble, b+4 high)."""
    n, k = codes_nk.shape
    c = codes_nk.to(torch.int64).view(n, k // 8, 8)
    lo, hi = c[..., :4], c[..., 4:]
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=c.device)
    words = ((lo | (hi << 4)) << shifts).sum(-1)
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


def unpack_words(words: torch.Tensor) -> torch.Tensor:
    """Inverse of pack_words: [N, K/8] int32 -> [N, K] uint8 codes."""
    w = words.to(torch.int64) & 0xFFFFFFFF
    shifts = torch.arange(0, 32, 8, dtype=torch.int64, device=w.device)
    b = (w.unsqueeze(-1) >> shifts) & 0xFF  # [N, K/8, 4]
    return torch.cat([b & 0xF, b >> 4], dim=-1).reshape(w.shape[0], -1).to(torch.uint8)


def to_fragment_order(words: torch.Tensor) -> torch.Tensor:
    """[N, K/8] words -> [N/16, K/16, 32]: lane h*16 + nl of (nt, ks) = word (16nt + nl, 2ks + h)."""
    n, kw = words.shape
    return words.view(n // 16, 16, kw // 2, 2).permute(0, 2, 3, 1).reshape(n // 16, kw // 2, 32).contiguous()


def from_fragment_order(wq: torch.Tensor) -> torch.Tensor:
    nt, ks, _ = wq.shape
    return wq.view(nt, ks, 2, 16).permute(0, 3, 1, 2).reshape(nt * 16, ks * 2).contiguous()


def rotation_records(pairs: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """[krot, K] local pairs + [krot, K/2] angles -> [krot, K/2, 4] int32 records."""
    krot, k = pairs.shape
    p = pairs.to(torch.int32).view(krot, k // 2, 2)
    ij = p[..., 0] | (p[..., 1] << 8)
    th = theta.to(torch.float32)
    rec = torch.zeros(krot, k // 2, 4, dtype=torch.int32, device=pairs.device)
    rec[..., 0] = ij
    rec[..., 1] = torch.cos(th).view(torch.int32)
    rec[..., 2] = torch.sin(th).view(torch.int32)
    return rec


def prepare(parts: Sequence[ParoTensors], layer: str = "linear", wperm: bool = True) -> PreparedParo:
    """Repack one linear (or the partitions of a merged linear, in output order) for the kernels."""
    if not parts:
        raise FormatError(f"{layer}: no partitions to prepare")
    for i, t in enumerate(parts):
        validate(t, f"{layer}[{i}]" if len(parts) > 1 else layer)
    k, krot = parts[0].in_features, parts[0].krot
    for i, t in enumerate(parts):
        if t.in_features != k or t.krot != krot:
            raise FormatError(f"{layer}[{i}]: partitions must share K={k} and krot={krot}, "
                              f"got K={t.in_features} krot={t.krot}")
    distinct, runs = dedup_rotations([Rotation.of(t) for t in parts], [t.out_features for t in parts])
    return prepare_merged(
        torch.cat([t.qweight for t in parts], dim=1), torch.cat([t.qzeros for t in parts], dim=1),
        torch.cat([t.scales for t in parts], dim=1), distinct, runs, layer=layer, wperm=wperm)


@dataclass
class RotationLayout:
    """The rotations as pq_rotate_quant reads them, and the GEMM's boundary select."""

    cs: torch.Tensor  # [R, K] f32
    rec: torch.Tensor  # [R, krot, K/2, 4] int32
    krot: int
    pb1: int
    pb2: int


def rotation_layout(rotations: Sequence[Rotation], runs: Sequence[Run], n: int, k: int, layer: str) -> RotationLayout:
    """The distinct rotations and their runs (kernels/linear.py) checked against the kernels' limits
    (R <= 3, boundaries on the 32-column wave tile, N a multiple of 16, one krot) and laid out."""
    krot = int(rotations[0].pairs.shape[0]) if rotations else 0
    if k % 128 or any(int(r.pairs.shape[0]) != krot for r in rotations):
        raise FormatError(f"{layer}: K={k} must be a multiple of 128 and every rotation [krot={krot}, K]")
    if n % 16:
        raise FormatError(f"{layer}: N={n} must be a multiple of 16")
    try:
        pb1, pb2 = kernel_bounds(layer, list(runs), list(rotations), n, k, BOUNDARY_MULTIPLE)
    except ValueError as e:
        raise FormatError(str(e)) from None
    cs = torch.stack([r.channel_scales.reshape(-1).to(torch.float32) for r in rotations]).contiguous()
    rec = torch.stack([rotation_records(r.pairs, r.theta) for r in rotations]).contiguous()
    return RotationLayout(cs, rec, krot, pb1, pb2)


def prepare_merged(qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
                   rotations: Sequence[Rotation], runs: Sequence[Run], layer: str = "linear",
                   wperm: bool = True) -> PreparedParo:
    """The checkpoint tensors concatenated along N, the distinct rotations in column order and their
    runs of output columns."""
    k, n = int(qweight.shape[0]), int(scales.shape[1])
    rot = rotation_layout(rotations, runs, n, k, layer)
    codes = unpack_awq(qweight)  # [K, N]
    zeros = unpack_awq(qzeros).to(torch.float16)  # [G, N]
    words = pack_words(codes.t().contiguous())
    wq = to_fragment_order(words) if wperm else words
    sc_bits = scales.contiguous().view(torch.int16).to(torch.int32) & 0xFFFF  # f16 bit patterns
    d_bits = (zeros - 8).view(torch.int16).to(torch.int32) & 0xFFFF
    sz = (sc_bits | (d_bits << 16)).contiguous()
    return PreparedParo(wq=wq.contiguous(), sz=sz, cs=rot.cs, rec=rot.rec, krot=rot.krot, in_features=k, out_features=n,
                        pb1=rot.pb1, pb2=rot.pb2, wperm=wperm)


def weight_codes(prep: PreparedParo) -> torch.Tensor:
    """The [N, K] uint4 codes back out of `wq` (either layout)."""
    return unpack_words(from_fragment_order(prep.wq) if prep.wperm else prep.wq)


def scale_and_d(prep: PreparedParo) -> tuple[torch.Tensor, torch.Tensor]:
    """sz -> (scale [G, N] f32, d = zero - 8 [G, N] f32)."""
    sz = prep.sz.to(torch.int64) & 0xFFFFFFFF

    def half(bits: torch.Tensor) -> torch.Tensor:
        signed = torch.where(bits >= 2**15, bits - 2**16, bits)
        return signed.to(torch.int16).view(torch.float16).to(torch.float32)

    return half(sz & 0xFFFF), half(sz >> 16)


def rotation_of_columns(prep: PreparedParo) -> torch.Tensor:
    """[N] int64: the rotation each output column reads (the kernel's boundary select)."""
    n = torch.arange(prep.out_features)
    return (n >= prep.pb1).to(torch.int64) + (n >= prep.pb2).to(torch.int64)

