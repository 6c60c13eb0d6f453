"""One description per quant method (kernels/methods/<method>.py, a `MethodSpec`): the checkpoint
format and its tensors, how (N, K) is read from them, whether the activations are rotated, how
`radiance quantize` makes it, and per platform the prepare / forward / fused-producer code, the
kernel registry and the rotation limit. Every table that names methods derives from `METHODS`
(the stack schema, the plugin's registration, kernels/ops.py, the launcher's kernel specs, the
checkpoint checks, the warm-up, the quantizer); adding a method is a new file here and its code.

No torch, no vLLM (kernels/methods/spec.py says why).
"""

from __future__ import annotations

from radiance.kernels.methods import dense, paroquant, paroquant_mxfp4, pq2
from radiance.kernels.methods.spec import GPU_ROTATIONS, ROTATION, MethodSpec, Platform, Tensor, resolve  # noqa: F401

# in the order the stack file's `quant` lists them
METHODS: dict[str, MethodSpec] = {s.name: s for s in (paroquant.SPEC, pq2.SPEC, paroquant_mxfp4.SPEC, dense.SPEC)}
# the methods a checkpoint is quantized with (vLLM quantization methods served by radiance's plugin)
CHECKPOINT_METHODS: tuple[str, ...] = tuple(s.name for s in METHODS.values() if s.checkpoint)
ROTATED_METHODS: tuple[str, ...] = tuple(s.name for s in METHODS.values() if s.rotated)


def get(name: str) -> MethodSpec:
    spec = METHODS.get(name)
    if spec is None:
        raise ValueError(f"radiance: no quant method {name!r}; the methods are {', '.join(METHODS)}")
    return spec
