"""`paroquant`: int4 asymmetric, group 128, learned pairwise Givens rotations of the activations
(z-lab's format: kernels/formats/paroquant.py)."""

from radiance.kernels.methods.spec import GPU_ROTATIONS, ROTATION, MethodSpec, Platform, Tensor

GROUP = 128
INT32 = (-(1 << 31), 1 << 31)

SPEC = MethodSpec(
    name="paroquant",
    summary="int4, group 128, learned pairwise Givens rotations on the activations",
    tensors={
        "qweight": Tensor("I32", lambda n, k, krot: (k, n // 8), 1, INT32),  # 8 codes per word along N
        "qzeros": Tensor("I32", lambda n, k, krot: (k // GROUP, n // 8), 1, INT32),
        "scales": Tensor("F16", lambda n, k, krot: (k // GROUP, n), 1, (0.01, 0.03)),
        **ROTATION,
    },
    codes="qweight",
    nk=lambda shape: (shape[1] * 8, shape[0]),
    rotated=True,
    checkpoint="paroquant",
    bits=4,
    group_size=GROUP,
    n_pack=8,
    tensor_set="radiance.kernels.formats.paroquant:ParoTensors",
    validate="radiance.kernels.formats.paroquant:validate",
    dequant="radiance.kernels.reference:dequant_paroquant",
    plugin="radiance.plugin.paroquant:ParoQuantConfig",
    quantize="radiance.quantize.rtn:paroquant_linear_tensors",
    variant="paroquant",
    platforms={
        "cuda": Platform(prepare="radiance.kernels.paro_ops:prepare_linear",
                         forward="radiance.kernels.paro_ops:forward_linear",
                         produced="radiance.kernels.paro_ops:produced_linear",
                         fused_rows="radiance.kernels.triton.paro_producers:FUSED_MAX_M",
                         kernels="radiance.kernels.nvidia.paroquant:KERNELS", rotation_limit=GPU_ROTATIONS),
        "rocm": Platform(prepare="radiance.kernels.hip.paroquant:prepare",
                         forward="radiance.kernels.hip.paroquant:forward",
                         produced="radiance.kernels.hip.paroquant:produced",
                         kernels="radiance.kernels.hip.kernels:PAROQUANT", rotation_limit=GPU_ROTATIONS),
        "cpu": Platform(prepare="radiance.kernels.cpu_ops:paroquant_prepare",
                        forward="radiance.kernels.cpu_ops:paroquant_forward", produced="radiance.kernels.ops:unfused"),
    },
)
