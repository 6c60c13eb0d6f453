"""What a `MethodSpec` holds: one quant method's checkpoint format, how it is made and how each
platform serves it. The method files beside this one fill it in; kernels/methods/__init__.py
collects them.

No torch, no vLLM: the launcher, `radiance setup` and the stack schema read these where neither is
installed. The code a platform runs is named by reference, `"module:attribute"`, and imported by
`resolve` only where it runs (an NVIDIA kernel module needs Triton, a CPU host has none).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

# The most distinct rotations one GPU GEMM of a rotated method takes: its kernels pick a column's
# rotated copy by two column boundaries (kernels/linear.kernel_bounds). The CPU takes any number.
GPU_ROTATIONS = 3

Shape = Callable[[int, int, int], tuple[int, ...]]  # (N, K, krot) -> the tensor's shape on disk


@dataclass(frozen=True)
class Tensor:
    """One checkpoint tensor of a linear (`<prefix>.<name>`)."""

    dtype: str  # the safetensors dtype: I32, I16, U8, F16, BF16
    shape: Shape
    n_dim: int | None = None  # the axis of the output features (merged partitions concatenate along it; TP splits it)
    # the values a checkpoint holds, [lo, hi) (integer dtypes: integers): the warm-up draws its
    # synthetic layers from here; None for the rotation tensors, which it builds as rotations
    values: tuple[float, float] | None = None


# the rotated formats' rotation (kernels/formats/paroquant.py documents the convention)
ROTATION = {
    "pairs": Tensor("I16", lambda n, k, krot: (krot, k)),
    "theta": Tensor("F16", lambda n, k, krot: (krot, k // 2)),
    "channel_scales": Tensor("F16", lambda n, k, krot: (1, k)),
}


@dataclass(frozen=True)
class Platform:
    """How one platform serves a method: `prepare(prep, tensors)` once per layer (lays the weights
    out, plans the kernels), `forward(prep, x, bias) -> y` per call, and optionally
    `produced(prep, producer, bias) -> y` (the op before the linear fused into it:
    kernels/producers.py) and `fused_rows`, {producer kind: the most rows it runs fused} (the
    warm-up compiles those). `kernels`: the registry (kernels/registry.py) its prepare plans from,
    in priority order. `rotation_limit`: the most distinct rotations one GEMM takes (None: any)."""

    prepare: str
    forward: str
    produced: str | None = None
    fused_rows: str | None = None
    kernels: str | None = None
    rotation_limit: int | None = None


@dataclass(frozen=True)
class MethodSpec:
    name: str  # the stack file's `quant`, vLLM's quantization method, prep.method
    summary: str  # one line, for errors and the docs
    tensors: dict[str, Tensor]  # one linear's checkpoint tensors, in the format's order
    codes: str  # the tensor whose shape gives the linear's (N, K) ...
    nk: Callable[[tuple[int, ...]], tuple[int, int]]  # ... this way
    platforms: dict[str, Platform]  # "cuda" | "rocm" | "cpu"
    rotated: bool = False  # activations rotated per distinct copy before the GEMM
    marker: str = ""  # the tensor whose presence says a module is in this format (default: codes)
    checkpoint: str | None = None  # config.json's quantization_config.quant_method; None: not a checkpoint format
    bits: int | None = None  # quantization_config.bits / group_size this method reads and writes
    group_size: int | None = None
    n_pack: int = 1  # output columns packed per code word: each partition's N a multiple of it
    tensor_set: str | None = None  # the format's TensorSet (kernels/formats) ...
    validate: str | None = None  # ... its validate(tensors, layer, bits, group_size) ...
    dequant: str | None = None  # ... and the exact reference's W [N, K] from its weight tensors (kernels/reference.py)
    plugin: str | None = None  # the vLLM QuantizationConfig class that serves it
    quantize: str | None = None  # `radiance quantize`'s round-to-nearest: (w[, pairs, theta, cs]) -> TensorSet
    variant: str | None = None  # the name quantized variants of a model start with (quantize/variants.py)

    @property
    def marked_by(self) -> str:
        return self.marker or self.codes

    @property
    def weights(self) -> dict[str, Tensor]:
        """The tensors other than the rotation's."""
        return {k: v for k, v in self.tensors.items() if k not in ROTATION}

    def shapes(self, n: int, k: int, krot: int = 8) -> dict[str, tuple[str, list[int]]]:
        """One linear's tensors of W [N, K]: name -> (dtype, shape)."""
        return {name: (t.dtype, list(t.shape(n, k, krot))) for name, t in self.tensors.items()}

    def platform(self, platform: str) -> Platform:
        found = self.platforms.get(platform)
        if found is None:
            raise NotImplementedError(
                f"radiance: no kernels for method={self.name} on platform={platform} (its MethodSpec, "
                f"kernels/methods/{self.name}.py, has {sorted(self.platforms)}); serve this method on a platform "
                "that has them")
        return found


def resolve(ref: str):
    """The object a `"module:attribute"` reference names (its module imported on first use; looked
    up each time, so a test may patch it)."""
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)
