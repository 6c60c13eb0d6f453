"""`pq2`: ternary weights (codes 0/1/2 = -1/0/+1, four per byte), one fp16 scale per 128 weights
(kernels/formats/pq2.py)."""

from radiance.kernels.methods.spec import MethodSpec, Platform, Tensor

GROUP = 128

SPEC = MethodSpec(
    name="pq2",
    summary="ternary weights, one fp16 scale per 128",
    tensors={
        "qweight": Tensor("U8", lambda n, k, krot: (n, k // 4), 0, (0, 255)),
        "scales": Tensor("F16", lambda n, k, krot: (n, k // GROUP), 0, (0.01, 0.03)),
    },
    codes="qweight",
    nk=lambda shape: (shape[0], shape[1] * 4),
    checkpoint="pq2",
    bits=2,
    group_size=GROUP,
    tensor_set="radiance.kernels.formats.pq2:Pq2Tensors",
    validate="radiance.kernels.formats.pq2:validate",
    dequant="radiance.kernels.reference:dequant_pq2",
    plugin="radiance.plugin.pq2:Pq2Config",
    quantize="radiance.quantize.rtn:pq2_linear_tensors",
    variant="pq2",
    platforms={
        "cuda": Platform(prepare="radiance.kernels.pq2_ops:prepare_linear",
                         forward="radiance.kernels.pq2_ops:forward_linear",
                         produced="radiance.kernels.pq2_ops:produced_linear",
                         fused_rows="radiance.kernels.pq2_ops:FUSED_MAX_M",
                         kernels="radiance.kernels.nvidia.pq2:KERNELS"),
        "cpu": Platform(prepare="radiance.kernels.cpu_ops:pq2_prepare", forward="radiance.kernels.cpu_ops:pq2_forward",
                        produced="radiance.kernels.ops:unfused"),
    },
)
