"""The radiance `pq2` (ternary) checkpoint format.

config.json: `quantization_config = {"quant_method": "pq2", "bits": 2, "group_size": 128}`.
Per quantized linear `<prefix>` (weight W [N, K]):

| tensor | shape | dtype | meaning |
|---|---|---|---|
| `<prefix>.qweight` | [N, K/4] | uint8 | 2-bit codes, element k at byte k/4, bits 2*(k%4)..2*(k%4)+1 |
| `<prefix>.scales` | [N, K/128] | float16 | one scale d per 128 weights |
| `<prefix>.bias` | [N] | bf16/f16 | optional, kept unquantized |

Codes 0/1/2 mean -1/0/+1 (code 3 is invalid); W[n, k] = (code - 1) * d[n, k/128]. Inside one
128-block this is byte-for-byte PQ2_0's `qs[32]` (see `gguf_pq2`), so import is a reshape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from radiance.kernels import methods
from radiance.kernels.formats import FormatError, TensorSet

GROUP_SIZE = 128
TENSORS = tuple(methods.get("pq2").tensors)  # kernels/methods/pq2.py


def pack_ternary(codes: torch.Tensor) -> torch.Tensor:
    """codes [N, K] with values 0..2 -> [N, K/4] uint8, element j at byte j/4, bit 2*(j%4)."""
    if codes.dim() != 2 or codes.shape[1] % 4:
        raise FormatError(f"pack_ternary: codes must be 2-D with K a multiple of 4, got {tuple(codes.shape)}")
    c = codes.to(torch.int32)
    if c.numel() and (int(c.min()) < 0 or int(c.max()) > 2):
        raise FormatError(f"pack_ternary: codes must lie in 0..2 (-1/0/+1), got {int(c.min())}..{int(c.max())}")
    c = c.view(c.shape[0], -1, 4)
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.int32, device=c.device)
    return (c << shifts).sum(-1).to(torch.uint8)


def unpack_ternary(qweight: torch.Tensor) -> torch.Tensor:
    """[N, K/4] uint8 -> codes [N, K] uint8 (0..3; 3 is invalid and rejected by `validate`)."""
    if qweight.dim() != 2 or qweight.dtype != torch.uint8:
        raise FormatError(f"unpack_ternary: expected a 2-D uint8 tensor, got {qweight.dtype} {tuple(qweight.shape)}")
    shifts = torch.tensor([0, 2, 4, 6], dtype=torch.int32, device=qweight.device)
    codes = (qweight.to(torch.int32).unsqueeze(-1) >> shifts) & 3
    return codes.reshape(qweight.shape[0], -1).to(torch.uint8)


@dataclass
class Pq2Tensors(TensorSet):
    METHOD: ClassVar[str] = "pq2"
    TENSORS: ClassVar[tuple[str, ...]] = TENSORS

    qweight: torch.Tensor  # [N, K/4] uint8
    scales: torch.Tensor  # [N, K/128] float16

    @property
    def in_features(self) -> int:
        return int(self.qweight.shape[1]) * 4

    @property
    def out_features(self) -> int:
        return int(self.qweight.shape[0])


def validate_config(layer: str, bits: int, group_size: int) -> None:
    if bits != 2:
        raise FormatError(f"{layer}: pq2 bits must be 2, got {bits}")
    if group_size != GROUP_SIZE:
        raise FormatError(f"{layer}: pq2 group_size must be {GROUP_SIZE}, got {group_size}")


def validate(t: Pq2Tensors, layer: str, bits: int = 2, group_size: int = GROUP_SIZE) -> None:
    """Check one linear's tensors; raise FormatError naming `layer`, the tensor and the expectation."""
    validate_config(layer, bits, group_size)
    q, s = t.qweight, t.scales
    if q.dim() != 2 or q.dtype != torch.uint8:
        raise FormatError(f"{layer}.qweight: expected 2-D [N, K/4] uint8, got {list(q.shape)} {q.dtype}")
    n, k = int(q.shape[0]), int(q.shape[1]) * 4
    if k % group_size:
        raise FormatError(f"{layer}.qweight: in_features K={k} is not a multiple of group size {group_size}")
    if tuple(s.shape) != (n, k // group_size) or s.dtype != torch.float16:
        raise FormatError(
            f"{layer}.scales: expected shape {[n, k // group_size]} torch.float16, got {list(s.shape)} {s.dtype}"
        )
    if not torch.isfinite(s).all():
        raise FormatError(f"{layer}.scales: holds non-finite values")
    # code 3 has no meaning; a byte holds one iff some 2-bit field is 0b11
    q32 = q.to(torch.int32)
    bad = ((q32 & (q32 >> 1)) & 0x55) != 0
    if bad.any():
        row, col = (int(v) for v in bad.nonzero()[0])
        raise FormatError(f"{layer}.qweight: invalid ternary code 3 in row {row}, byte {col} (codes are 0/1/2)")
