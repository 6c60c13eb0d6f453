"""Checkpoint formats radiance reads and writes (pack/unpack and validation only; no math).

- `paroquant`: z-lab's int4 asymmetric AWQ-packed layout with Givens rotations.
- `pq2`: radiance's ternary layout (2-bit codes, one fp16 scale per 128 weights).
- `gguf_pq2`: PQ2_0 GGUF (ggml type 142) -> the `pq2` safetensors layout.

Every violation is a `FormatError` naming the layer, the tensor and what was expected.
"""

from __future__ import annotations

from typing import ClassVar


class FormatError(ValueError):
    """A checkpoint tensor does not match its format (message names layer, tensor, expectation)."""


class TensorSet:
    """A format's tensors of one linear, as a dataclass whose fields are the checkpoint tensor names
    (`<prefix>.<field>`, in the order TENSORS lists them); METHOD names the format in errors."""

    METHOD: ClassVar[str]
    TENSORS: ClassVar[tuple[str, ...]]

    @classmethod
    def from_state(cls, state: dict, prefix: str):
        missing = [f"{prefix}.{n}" for n in cls.TENSORS if f"{prefix}.{n}" not in state]
        if missing:
            raise FormatError(f"{prefix}: missing {cls.METHOD} tensors {missing}")
        return cls(**{n: state[f"{prefix}.{n}"] for n in cls.TENSORS})

    def to_state(self, prefix: str) -> dict:
        return {f"{prefix}.{n}": getattr(self, n).contiguous() for n in self.TENSORS}


# The version of radiance's checkpoint layouts (this package), written by `radiance quantize` into
# quantization_config. Major: the layout changed incompatibly, a reader refuses another major;
# minor: additions an older reader may ignore. Checkpoints without it (z-lab's paroquant exports,
# GGUF imports, radiance before versioning) are the 1.x layout.
FORMAT_VERSION = "1.0"
FORMAT_KEY = "format_version"


def check_format_version(config: dict, where: str) -> None:
    """Refuse a checkpoint whose format major version this radiance does not read."""
    raw = config.get(FORMAT_KEY)
    if raw is None:
        return
    major = str(raw).split(".")[0]
    if not isinstance(raw, str) or not major.isdigit():
        raise FormatError(f"{where}.{FORMAT_KEY}: {raw!r} is not a version like {FORMAT_VERSION!r}")
    if major != FORMAT_VERSION.split(".")[0]:
        raise FormatError(f"{where}.{FORMAT_KEY} is {raw!r}, but this radiance reads format "
                          f"{FORMAT_VERSION.split('.')[0]}.x: the checkpoint was written by another radiance "
                          f"release; serve it with a matching radiance or quantize it again with this one")
