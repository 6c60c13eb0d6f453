"""The `paroquant_mxfp4` checkpoint format (MXFP4-PARO): paroquant's rotations on an OCP MXFP4 grid.

Per quantized linear `<prefix>` (weight W [N, K]):

| tensor | shape | dtype | meaning |
|---|---|---|---|
| `<prefix>.weight` | [N, K/2] | uint8 | two e2m1 codes per byte along K, the even index in the low nibble |
| `<prefix>.weight_scale` | [N, K/32] | uint8 | e8m0 shared exponent per 32 weights along K: 2^(byte - 127); 255 is NaN |
| `<prefix>.pairs`, `.theta`, `.channel_scales` | as paroquant | | the rotation (kernels/formats/paroquant.py) |

An e2m1 code is sign (bit 3) and magnitude index (bits 0-2) into E2M1 = (0, 0.5, 1, 1.5, 2, 3, 4, 6).
W_rot[n, k] = E2M1 value of code[n, k] * 2^(scale[n, k/32] - 127), and y = ((x * cs) R^T) W_rot^T:
the same rotation as paroquant, so the two formats share rotations and the activation path. The
byte layouts are Quark's MXFP4 buffers (what AMD's MXFP4 checkpoints store).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from radiance.kernels import methods
from radiance.kernels.formats import FormatError, TensorSet
from radiance.kernels.formats.paroquant import GROUP_SIZE, MAX_KROT, check_pairs

BLOCK = 32  # weights per e8m0 scale, along K
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E8M0_BIAS = 127
E8M0_NAN = 255
TENSORS = tuple(methods.get("paroquant_mxfp4").tensors)  # kernels/methods/paroquant_mxfp4.py


def pack_e2m1(codes: torch.Tensor) -> torch.Tensor:
    """e2m1 codes [N, K] (0..15) -> [N, K/2] uint8, the even column in the low nibble."""
    if codes.dim() != 2 or codes.shape[1] % 2:
        raise FormatError(f"pack_e2m1: codes must be 2-D with an even column count, got {tuple(codes.shape)}")
    c = codes.to(torch.uint8)
    return (c[:, 0::2] | (c[:, 1::2] << 4)).contiguous()


def unpack_e2m1(packed: torch.Tensor) -> torch.Tensor:
    """[N, K/2] uint8 -> e2m1 codes [N, K] uint8."""
    lo, hi = packed & 0xF, packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(packed.shape[0], -1)


@dataclass
class Mxfp4Tensors(TensorSet):
    """The five tensors of one paroquant_mxfp4 linear (see the module docstring for layout)."""

    METHOD: ClassVar[str] = "paroquant_mxfp4"
    TENSORS: ClassVar[tuple[str, ...]] = TENSORS

    weight: torch.Tensor
    weight_scale: torch.Tensor
    pairs: torch.Tensor
    theta: torch.Tensor
    channel_scales: torch.Tensor

    @property
    def in_features(self) -> int:
        return int(self.weight.shape[1]) * 2

    @property
    def out_features(self) -> int:
        return int(self.weight.shape[0])


def validate_config(layer: str, bits: int, group_size: int) -> None:
    if bits != 4:
        raise FormatError(f"{layer}: paroquant_mxfp4 bits must be 4, got {bits}")
    if group_size != BLOCK:
        raise FormatError(f"{layer}: paroquant_mxfp4 group_size must be {BLOCK} (the e8m0 block), got {group_size}")


def _expect(layer: str, name: str, t: torch.Tensor, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    if tuple(t.shape) != shape or t.dtype != dtype:
        raise FormatError(f"{layer}.{name}: expected shape {list(shape)} {dtype}, got {list(t.shape)} {t.dtype}")


def validate(t: Mxfp4Tensors, layer: str, bits: int = 4, group_size: int = BLOCK) -> None:
    """Check one linear's tensors; raise FormatError naming `layer`, the tensor and the expectation."""
    validate_config(layer, bits, group_size)
    if t.weight.dim() != 2 or t.pairs.dim() != 2:
        raise FormatError(f"{layer}: weight [N, K/2] and pairs [krot, K] must be 2-D, got "
                          f"{list(t.weight.shape)} and {list(t.pairs.shape)}")
    n, k = t.out_features, t.in_features
    if k % GROUP_SIZE:
        raise FormatError(f"{layer}.weight: in_features K={k} is not a multiple of the rotation group {GROUP_SIZE}")
    krot = int(t.pairs.shape[0])
    if not 1 <= krot <= MAX_KROT:
        raise FormatError(f"{layer}.pairs: krot={krot} must be between 1 and {MAX_KROT}")
    _expect(layer, "weight", t.weight, (n, k // 2), torch.uint8)
    _expect(layer, "weight_scale", t.weight_scale, (n, k // BLOCK), torch.uint8)
    _expect(layer, "pairs", t.pairs, (krot, k), torch.int16)
    _expect(layer, "theta", t.theta, (krot, k // 2), torch.float16)
    _expect(layer, "channel_scales", t.channel_scales, (1, k), torch.float16)
    if bool((t.weight_scale == E8M0_NAN).any()):
        raise FormatError(f"{layer}.weight_scale: holds the e8m0 NaN (255)")
    check_pairs(t.pairs, layer)
    for name in ("theta", "channel_scales"):
        if not torch.isfinite(getattr(t, name)).all():
            raise FormatError(f"{layer}.{name}: holds non-finite values")
