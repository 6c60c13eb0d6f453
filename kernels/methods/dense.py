"""`dense`: a linear left unquantized (a skipped module, kept 16-bit), served beside a quantized
model's linears by the same ops."""

from radiance.kernels.methods.spec import MethodSpec, Platform, Tensor

SPEC = MethodSpec(
    name="dense",
    summary="an unquantized (skipped) linear",
    tensors={"weight": Tensor("BF16", lambda n, k, krot: (n, k), 0, (-0.04, 0.04))},
    codes="weight",
    nk=lambda shape: (shape[0], shape[1]),
    platforms={
        "cuda": Platform(prepare="radiance.kernels.nvidia.dense:prepare", forward="radiance.kernels.nvidia.dense:forward",
                         kernels="radiance.kernels.nvidia.dense:KERNELS"),
        "rocm": Platform(prepare="radiance.kernels.hip.dense:prepare", forward="radiance.kernels.hip.dense:forward",
                         kernels="radiance.kernels.hip.kernels:DENSE"),
        "cpu": Platform(prepare="radiance.kernels.cpu_ops:dense_prepare", forward="radiance.kernels.cpu_ops:dense_forward"),
    },
)
