"""`paroquant_mxfp4` (MXFP4-PARO): paroquant's rotations, the weight on the OCP MXFP4 grid (e2m1
codes, one e8m0 scale per 32 weights along K: kernels/formats/paroquant_mxfp4.py)."""

from radiance.kernels.methods.spec import GPU_ROTATIONS, ROTATION, MethodSpec, Platform, Tensor

BLOCK = 32

SPEC = MethodSpec(
    name="paroquant_mxfp4",
    summary="paroquant's rotations, the weight on an OCP MXFP4 grid",
    tensors={
        "weight": Tensor("U8", lambda n, k, krot: (n, k // 2), 0, (0, 256)),  # two e2m1 per byte along K
        # e8m0 exponents near 2^-7, a realistic weight range
        "weight_scale": Tensor("U8", lambda n, k, krot: (n, k // BLOCK), 0, (118, 122)),
        **ROTATION,
    },
    codes="weight",
    nk=lambda shape: (shape[0], shape[1] * 2),
    marker="weight_scale",  # `weight` alone is an unquantized linear's
    rotated=True,
    checkpoint="paroquant_mxfp4",
    bits=4,
    group_size=BLOCK,
    tensor_set="radiance.kernels.formats.paroquant_mxfp4:Mxfp4Tensors",
    validate="radiance.kernels.formats.paroquant_mxfp4:validate",
    dequant="radiance.kernels.reference:dequant_mxfp4",
    plugin="radiance.plugin.paroquant_mxfp4:ParoQuantMxfp4Config",
    quantize="radiance.quantize.rtn:paroquant_mxfp4_linear_tensors",
    variant="mxfp4",
    platforms={
        "cuda": Platform(prepare="radiance.kernels.mxfp4_ops:prepare_linear",
                         forward="radiance.kernels.mxfp4_ops:forward_linear",
                         produced="radiance.kernels.mxfp4_ops:produced_linear",
                         fused_rows="radiance.kernels.triton.paro_producers:FUSED_MAX_M",
                         kernels="radiance.kernels.nvidia.mxfp4:KERNELS", rotation_limit=GPU_ROTATIONS),
        "rocm": Platform(prepare="radiance.kernels.hip.mxfp4:prepare", forward="radiance.kernels.hip.mxfp4:forward",
                         produced="radiance.kernels.hip.mxfp4:produced",
                         kernels="radiance.kernels.hip.kernels:MXFP4", rotation_limit=GPU_ROTATIONS),
        # the CPU runs paroquant's forward: the same rotations before a dequantized weight
        "cpu": Platform(prepare="radiance.kernels.cpu_ops:mxfp4_prepare",
                        forward="radiance.kernels.cpu_ops:paroquant_forward", produced="radiance.kernels.ops:unfused"),
    },
)
