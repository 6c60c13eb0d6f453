"""Checkpoint formats radiance reads and writes (pack/unpack and validation only; no math).

- `paroquant`: z-lab's int4 asymmetric AWQ-packed layout with Givens rotations.
- `pq2`: radiance's ternary layout (2-bit codes, one fp16 scale per 128 weights).
- `gguf_pq2`: PQ2_0 GGUF (ggml type 142) -> the `pq2` safetensors layout.

Every violation is a `FormatError` naming the layer, the tensor and what was expected.
"""

from __future__ import annotations


class FormatError(ValueError):
    """A checkpoint tensor does not match its format (message names layer, tensor, expectation)."""
