"""The `paroquant` checkpoint format, exactly as z-lab stores it (one set per nn.Linear).

Per quantized linear `<prefix>` (weight W [N, K], N = out_features, K = in_features):

| tensor | shape | dtype | meaning |
|---|---|---|---|
| `<prefix>.qweight` | [K, N/8] | int32 | uint4 codes, 8 per int32 along N, AWQ nibble order |
| `<prefix>.qzeros` | [K/128, N/8] | int32 | uint4 zero points (asymmetric, NOT offset by one), same packing |
| `<prefix>.scales` | [K/128, N] | float16 | one scale per (group, output) |
| `<prefix>.pairs` | [krot, K] | int16 | Givens pairs, local to each 128-group |
| `<prefix>.theta` | [krot, K/2] | float16 | one angle per pair |
| `<prefix>.channel_scales` | [1, K] | float16 | pre-inverted: activations are multiplied by it |
| `<prefix>.bias` | [N] | bf16/f16 | optional, kept unquantized |

AWQ nibble order: nibble p (bits 4p..4p+3) of packed word b holds column 8b + AWQ_ORDER[p];
AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7). Dequantized W[n, k] = (q[k, n] - z[k/128, n]) * s[k/128, n].

Rotation convention (checked against z-lab's paroquant: export/math.py `fuse_inverse_rotations`
and the Metal rotation kernel): within group g of layer r, pair p (0..63) is
(i, j) = (g*128 + pairs[r, g*128 + 2p], g*128 + pairs[r, g*128 + 2p + 1]) with angle
theta[r, g*64 + p]; the even entries are the i's, the odd ones the j's, and the 64 pairs of one
layer partition the group. See `radiance.kernels.reference.rotate` for the arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from radiance.kernels import methods
from radiance.kernels.formats import FormatError, TensorSet

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
# argsort of AWQ_ORDER: column c of a block of 8 lives in nibble AWQ_INV[c]
AWQ_INV = (0, 4, 1, 5, 2, 6, 3, 7)
GROUP_SIZE = 128
MAX_KROT = 8
TENSORS = tuple(methods.get("paroquant").tensors)  # kernels/methods/paroquant.py


def pack_awq(codes: torch.Tensor) -> torch.Tensor:
    """uint4 codes [R, C] (values 0..15, any int dtype) -> [R, C/8] int32 in AWQ nibble order."""
    if codes.dim() != 2 or codes.shape[1] % 8:
        raise FormatError(f"pack_awq: codes must be 2-D with columns a multiple of 8, got {tuple(codes.shape)}")
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) > 15):
        raise FormatError(f"pack_awq: codes must lie in 0..15, got {int(codes.min())}..{int(codes.max())}")
    blocks = codes.to(torch.int32).view(codes.shape[0], -1, 8)
    words = torch.zeros(blocks.shape[:2], dtype=torch.int32, device=codes.device)
    for nibble, column in enumerate(AWQ_ORDER):
        # int32 shifts wrap: nibble 7 lands in the sign bit exactly as AWQ checkpoints store it
        words |= blocks[:, :, column] << (4 * nibble)
    return words


def unpack_awq(packed: torch.Tensor) -> torch.Tensor:
    """[R, C/8] int32 in AWQ nibble order -> uint4 codes [R, C] uint8."""
    if packed.dim() != 2 or packed.dtype != torch.int32:
        raise FormatError(f"unpack_awq: expected a 2-D int32 tensor, got {packed.dtype} {tuple(packed.shape)}")
    shifts = torch.arange(0, 32, 4, dtype=torch.int32, device=packed.device)
    nibbles = (packed.unsqueeze(-1) >> shifts) & 0xF  # [R, C/8, 8], nibble-major
    return nibbles[:, :, list(AWQ_INV)].reshape(packed.shape[0], -1).to(torch.uint8)


@dataclass
class ParoTensors(TensorSet):
    """The six tensors of one paroquant linear (see the module docstring for layout)."""

    METHOD: ClassVar[str] = "paroquant"
    TENSORS: ClassVar[tuple[str, ...]] = TENSORS

    qweight: torch.Tensor
    qzeros: torch.Tensor
    scales: torch.Tensor
    pairs: torch.Tensor
    theta: torch.Tensor
    channel_scales: torch.Tensor

    @property
    def in_features(self) -> int:
        return int(self.qweight.shape[0])

    @property
    def out_features(self) -> int:
        return int(self.scales.shape[1])

    @property
    def krot(self) -> int:
        return int(self.pairs.shape[0])


def _expect(layer: str, name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise FormatError(
            f"{layer}.{name}: expected shape {list(shape)} {dtype}, got {list(t.shape)} {t.dtype}"
        )


def validate_config(layer: str, bits: int, group_size: int) -> None:
    if bits != 4:
        raise FormatError(f"{layer}: paroquant bits must be 4, got {bits}")
    if group_size != GROUP_SIZE:
        raise FormatError(f"{layer}: paroquant group_size must be {GROUP_SIZE}, got {group_size}")


def validate(t: ParoTensors, layer: str, bits: int = 4, group_size: int = GROUP_SIZE) -> None:
    """Check one linear's tensors; raise FormatError naming `layer`, the tensor and the expectation."""
    validate_config(layer, bits, group_size)
    if t.qweight.dim() != 2:
        raise FormatError(f"{layer}.qweight: expected 2-D [K, N/8], got {list(t.qweight.shape)}")
    k = int(t.qweight.shape[0])
    if k % group_size:
        raise FormatError(f"{layer}.qweight: in_features K={k} is not a multiple of group size {group_size}")
    if t.scales.dim() != 2:
        raise FormatError(f"{layer}.scales: expected 2-D [K/128, N], got {list(t.scales.shape)}")
    n = int(t.scales.shape[1])
    if n % 8:
        raise FormatError(f"{layer}.scales: out_features N={n} is not a multiple of 8")
    if t.pairs.dim() != 2:
        raise FormatError(f"{layer}.pairs: expected 2-D [krot, K], got {list(t.pairs.shape)}")
    krot = int(t.pairs.shape[0])
    if not 1 <= krot <= MAX_KROT:
        raise FormatError(f"{layer}.pairs: krot={krot} must be between 1 and {MAX_KROT}")
    g = k // group_size
    _expect(layer, "qweight", t.qweight, (k, n // 8), torch.int32)
    _expect(layer, "qzeros", t.qzeros, (g, n // 8), torch.int32)
    _expect(layer, "scales", t.scales, (g, n), torch.float16)
    _expect(layer, "pairs", t.pairs, (krot, k), torch.int16)
    _expect(layer, "theta", t.theta, (krot, k // 2), torch.float16)
    _expect(layer, "channel_scales", t.channel_scales, (1, k), torch.float16)
    check_pairs(t.pairs, layer, group_size)
    for name in ("scales", "theta", "channel_scales"):
        if not torch.isfinite(getattr(t, name)).all():
            raise FormatError(f"{layer}.{name}: holds non-finite values")


def check_pairs(pairs: torch.Tensor, layer: str, group_size: int = GROUP_SIZE) -> None:
    """Every rotation layer's row must be a permutation of 0..group_size-1 inside each group."""
    krot, k = pairs.shape
    grouped = pairs.to(torch.int64).view(krot, k // group_size, group_size)
    ok = torch.sort(grouped, dim=-1).values == torch.arange(group_size, device=pairs.device)
    bad = (~ok.all(-1)).nonzero()
    if bad.numel():
        r, gi = (int(v) for v in bad[0])
        raise FormatError(
            f"{layer}.pairs: rotation layer {r}, group {gi} is not a permutation of 0..{group_size - 1} "
            f"(pairs must be local to each {group_size}-group and partition it)"
        )
