"""Per-layer ops the vLLM plugin calls, and THE dispatch table (method x platform x M band x kernel set).

The plugin calls `prepare_paroquant` / `prepare_pq2` / `prepare_dense` once after loading, and
`linear_forward(prep, x, bias)` per call. `linear_forward` picks the kernel from `DISPATCH` by the
layer's method and platform, the call's row count (`band`) and the kernel set; a missing row is an
error naming the key (no silent fallback). On CPU every row computes exactly what
`radiance.kernels.reference` computes (tests/test_ops.py checks bit equality); GPU kernel engineers
add rows for their platform here, next to a `prepare` for that platform.

No vLLM import here: `radiance.kernels` must run without vLLM.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from radiance.kernels import cpu_folded, reference
from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors, unpack_awq
from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.formats.pq2 import Pq2Tensors, unpack_ternary
from radiance.knobs import knob, knob_int

METHODS = ("paroquant", "paroquant_mxfp4", "pq2", "dense")
BANDS = ("decode", "prefill")
KERNEL_SETS = ("tuned", "exact", "legacy")


@dataclass
class Rotation:
    """One distinct rotation of a linear's input: raw tensors (for kernels) and the CPU plan."""

    pairs: torch.Tensor  # [krot, K] int16
    theta: torch.Tensor  # [krot, K/2] float16
    channel_scales: torch.Tensor  # [1, K] float16
    plan: reference.RotationPlan


@dataclass(frozen=True)
class Run:
    """Output columns [n0, n1) are computed from rotated input copy `rotation`."""

    n0: int
    n1: int
    rotation: int


@dataclass
class PreparedLinear:
    """What one layer's kernels need, built once after loading."""

    method: str
    platform: str
    in_features: int
    out_features: int
    rotations: list[Rotation] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    decode_max_m: int = 64
    kernel_set: str = "tuned"
    data: dict[str, torch.Tensor] = field(default_factory=dict)  # per-platform payload
    # CPU (kernels/cpu_folded.py), handed over by the plugin: `gemm` (x, bias) -> y, vLLM's own GEMM on
    # the folded weight (else torch's); `run_gemms`, per run, vLLM's int4 GEMM on the rotated copy
    gemm: Callable | None = None
    run_gemms: list[Callable] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str]:
        return (self.method, self.platform)


KernelFn = Callable[[PreparedLinear, torch.Tensor, "torch.Tensor | None"], torch.Tensor]


# ----------------------------------------------------------------------------- dispatch keys
def platform_of(device: torch.device) -> str:
    if device.type == "cpu":
        return "cpu"
    if device.type == "cuda":
        return "rocm" if getattr(torch.version, "hip", None) else "cuda"
    return device.type


def band(m: int, decode_max_m: int) -> str:
    """Decode band for skinny calls (M rows <= RADIANCE_PQ_DECODE_MAX_M), prefill above."""
    return "decode" if m <= decode_max_m else "prefill"


def kernel_set(method: str) -> str:
    if method != "pq2":
        return "tuned"
    value = knob("RADIANCE_PQ2_KERNELS") or "tuned"
    if value not in KERNEL_SETS:
        raise ValueError(f"RADIANCE_PQ2_KERNELS={value!r}: use one of {', '.join(KERNEL_SETS)}")
    return value


def lookup(prep: PreparedLinear, m: int) -> KernelFn:
    key = (prep.method, prep.platform, band(m, prep.decode_max_m), prep.kernel_set)
    fn = DISPATCH.get(key)
    if fn is None:
        raise NotImplementedError(
            f"radiance: no kernel for method={key[0]} platform={key[1]} band={key[2]} kernel_set={key[3]} "
            "in radiance.kernels.ops.DISPATCH; add a row for this platform or serve on one that has it"
        )
    return fn


def linear_forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """y [M, N] = the layer applied to x [M, K] (plus bias), by the dispatch table."""
    if x.dim() != 2 or x.shape[1] != prep.in_features:
        raise ValueError(f"radiance: expected input [M, {prep.in_features}], got {list(x.shape)}")
    return lookup(prep, x.shape[0])(prep, x, bias)


# ----------------------------------------------------------------------------- rotations (shared by every platform)
def dedup_rotations(
    rotations: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], sizes: list[int]
) -> tuple[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], list[Run]]:
    """Merge identical adjacent per-partition rotations into runs of output columns."""
    if len(rotations) != len(sizes):
        raise ValueError(f"radiance: {len(rotations)} rotations for {len(sizes)} partitions")
    distinct: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
    runs: list[Run] = []
    n0 = 0
    for rot, size in zip(rotations, sizes):
        same = bool(distinct) and all(torch.equal(a, b) for a, b in zip(distinct[-1], rot))
        if same:
            last = runs[-1]
            runs[-1] = Run(last.n0, n0 + size, last.rotation)
        else:
            distinct.append(rot)
            runs.append(Run(n0, n0 + size, len(distinct) - 1))
        n0 += size
    return distinct, runs


def rotate_all(prep: PreparedLinear, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One rotated copy of x per distinct rotation (the tuple the GEMM takes)."""
    return tuple(reference.apply_rotation(x, r.plan, r.channel_scales) for r in prep.rotations)


def check_partitions(prep: PreparedLinear, xs: tuple[torch.Tensor, ...]) -> None:
    """The partition-count guard: a rotated-activation tuple must match the layer exactly.

    On a GPU a mismatched tuple makes the GEMM read past the activation buffer (a hang, not a
    fault), so every platform checks it here first."""
    if len(xs) != len(prep.rotations):
        raise ValueError(
            f"radiance: rotated-activation tuple has {len(xs)} copies but the layer has "
            f"{len(prep.rotations)} distinct rotations (runs {[(r.n0, r.n1, r.rotation) for r in prep.runs]})"
        )
    for i, xr in enumerate(xs):
        if xr.dim() != 2 or xr.shape[1] != prep.in_features:
            raise ValueError(f"radiance: rotated copy {i} has shape {list(xr.shape)}, expected [M, {prep.in_features}]")


# ----------------------------------------------------------------------------- prepare (once per layer)
def prepare_paroquant(
    qweight: torch.Tensor, qzeros: torch.Tensor, scales: torch.Tensor,
    rotations: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], partition_sizes: list[int],
    platform: str | None = None,
) -> PreparedLinear:
    """qweight/qzeros/scales concatenated along N over the partitions; one (pairs, theta,
    channel_scales) per partition. Identical adjacent rotations are merged. `platform`: the
    tensors' device's unless given (the offline compile check prepares CPU tensors for a GPU)."""
    prep, first = _rotated("paroquant", int(scales.shape[1]), int(qweight.shape[0]), qweight.device, rotations,
                           partition_sizes, platform)
    _prepare_for(prep)(prep, ParoTensors(qweight, qzeros, scales, *first))
    return prep


def prepare_paroquant_mxfp4(
    weight: torch.Tensor, weight_scale: torch.Tensor,
    rotations: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]], partition_sizes: list[int],
    platform: str | None = None,
) -> PreparedLinear:
    """weight [N, K/2] / weight_scale [N, K/32] concatenated along N over the partitions; rotations as
    prepare_paroquant's."""
    prep, first = _rotated("paroquant_mxfp4", int(weight.shape[0]), int(weight.shape[1]) * 2, weight.device,
                           rotations, partition_sizes, platform)
    _prepare_for(prep)(prep, Mxfp4Tensors(weight, weight_scale, *first))
    return prep


def _rotated(method: str, n: int, k: int, device: torch.device, rotations: list, partition_sizes: list[int],
             platform: str | None) -> tuple[PreparedLinear, tuple]:
    """A rotated method's PreparedLinear with its distinct rotations and runs; -> (prep, first rotation)."""
    distinct, runs = dedup_rotations(rotations, partition_sizes)
    prep = PreparedLinear(
        method=method, platform=platform or platform_of(device), in_features=k, out_features=n,
        runs=runs, decode_max_m=knob_int("RADIANCE_PQ_DECODE_MAX_M"), kernel_set=kernel_set(method),
    )
    for pairs, theta, cs in distinct:
        plan = reference.rotation_plan(pairs, theta, GROUP_SIZE, torch.float32)
        prep.rotations.append(Rotation(pairs, theta, cs, plan))
    return prep, distinct[0]


def prepare_pq2(qweight: torch.Tensor, scales: torch.Tensor, platform: str | None = None) -> PreparedLinear:
    n, k = int(qweight.shape[0]), int(qweight.shape[1]) * 4
    prep = PreparedLinear(
        method="pq2", platform=platform or platform_of(qweight.device), in_features=k, out_features=n,
        runs=[Run(0, n, -1)], decode_max_m=knob_int("RADIANCE_PQ_DECODE_MAX_M"), kernel_set=kernel_set("pq2"),
    )
    _prepare_for(prep)(prep, Pq2Tensors(qweight, scales))
    return prep


def prepare_dense(weight: torch.Tensor, platform: str | None = None) -> PreparedLinear:
    """An unquantized (skipped) linear; GPU rows may route skinny calls to a split-K kernel."""
    n, k = (int(s) for s in weight.shape)
    prep = PreparedLinear(
        method="dense", platform=platform or platform_of(weight.device), in_features=k, out_features=n,
        runs=[Run(0, n, -1)], decode_max_m=knob_int("RADIANCE_PQ_DECODE_MAX_M"),
    )
    _prepare_for(prep)(prep, weight)
    return prep


def _prepare_for(prep: PreparedLinear) -> Callable:
    fn = PREPARE.get(prep.key)
    if fn is None:
        raise NotImplementedError(
            f"radiance: no weight preparation for method={prep.method} platform={prep.platform} "
            "in radiance.kernels.ops.PREPARE"
        )
    return fn


# ----------------------------------------------------------------------------- CPU: the folded fast path, or the exact reference
def _cpu_weights() -> str:
    value = knob("RADIANCE_CPU_WEIGHTS")
    if value not in ("folded", "int4", "fp32", "int8"):
        raise ValueError(f"RADIANCE_CPU_WEIGHTS={value!r}: use folded (one GEMM per linear, the fast path), int4 "
                         "(4x smaller weights, vLLM's int4 GEMM), or the exact reference's fp32 or int8")
    return value


def _paroquant_cpu_prepare(prep: PreparedLinear, t: ParoTensors) -> None:
    mode = _cpu_weights()
    if mode in ("folded", "int4"):
        return (cpu_folded.prepare_paroquant if mode == "folded" else cpu_folded.prepare_rotated)(prep, t)
    # (q - z) as int8 [N, K] and fp32 scales. RADIANCE_CPU_WEIGHTS=fp32 builds the dequantized
    # weight once from them (the same ops as the per-call rebuild, so the same bits) and keeps it.
    q = unpack_awq(t.qweight).to(torch.int16)
    z = unpack_awq(t.qzeros).to(torch.int16).repeat_interleave(GROUP_SIZE, dim=0)
    prep.data["qz"] = (q - z).to(torch.int8).t().contiguous()
    prep.data["s"] = t.scales.to(torch.float32).t().contiguous()  # [N, G]
    if _cpu_weights() == "fp32":
        prep.data["w"] = _paroquant_weight_cpu(prep, 0, prep.out_features)
        del prep.data["qz"], prep.data["s"]


def _mxfp4_cpu_prepare(prep: PreparedLinear, t: Mxfp4Tensors) -> None:
    if _cpu_weights() in ("folded", "int4"):
        return cpu_folded.prepare_mxfp4(prep, t)
    # exact: the fp32 dequantized weight (int8 too: e2m1 x e8m0 has no integer form to rebuild from)
    prep.data["w"] = reference.dequant_mxfp4(t.weight, t.weight_scale)


def _paroquant_weight_cpu(prep: PreparedLinear, n0: int, n1: int) -> torch.Tensor:
    """reference.dequant_paroquant's W[n0:n1] (fp32 [n, K]), bit for bit."""
    if "w" in prep.data:
        return prep.data["w"][n0:n1]
    qz, s = prep.data["qz"][n0:n1], prep.data["s"][n0:n1]
    n, k = qz.shape
    return (qz.to(torch.float32).view(n, k // GROUP_SIZE, GROUP_SIZE) * s.unsqueeze(-1)).view(n, k)


def _paroquant_gemm_cpu(
    prep: PreparedLinear, xs: tuple[torch.Tensor, ...], bias: torch.Tensor | None, out_dtype: torch.dtype
) -> torch.Tensor:
    check_partitions(prep, xs)
    b = None if bias is None else bias.to(torch.float32)
    if len(prep.runs) == 1:  # exactly reference.paroquant_linear's ops
        y = xs[0] @ _paroquant_weight_cpu(prep, 0, prep.out_features).t()
        return (y if b is None else y + b).to(out_dtype)
    parts = []
    for run in prep.runs:  # each run is reference.paroquant_linear of that projection
        y = xs[run.rotation] @ _paroquant_weight_cpu(prep, run.n0, run.n1).t()
        parts.append(y if b is None else y + b[run.n0:run.n1])
    return torch.cat(parts, dim=1).to(out_dtype)


def _paroquant_cpu(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if prep.run_gemms:
        return cpu_folded.rotated_linear(prep, x, bias)
    if "qz" not in prep.data and "w" not in prep.data:
        return cpu_folded.paroquant_linear(prep, x, bias)
    return _paroquant_gemm_cpu(prep, rotate_all(prep, x), bias, x.dtype)


def _pq2_cpu_prepare(prep: PreparedLinear, t: Pq2Tensors) -> None:
    if _cpu_weights() in ("folded", "int4"):  # ternary codes take no int4 GEMM: int4 runs folded too
        return cpu_folded.prepare_pq2(prep, t)
    n, groups = (int(s) for s in t.scales.shape)
    codes = unpack_ternary(t.qweight).view(n, groups, GROUP_SIZE)  # uint8 0..2
    prep.data["codes"] = codes.to(torch.float32) if _cpu_weights() == "fp32" else codes
    prep.data["d"] = t.scales.to(torch.float32)


def _pq2_cpu(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None, chunk_rows: int = 256) -> torch.Tensor:
    if "codes" not in prep.data:
        return cpu_folded.pq2_linear(prep, x, bias)
    # reference.pq2_linear(act_quant=True) with the unpacked codes cached (same ops, same order)
    codes, d = prep.data["codes"].to(torch.float32), prep.data["d"]
    n, groups = d.shape
    x2 = x.to(torch.float32)
    outs = []
    for rows in x2.split(chunk_rows):
        q, a = reference.quant_int8_group(rows, GROUP_SIZE)
        qg = q.to(torch.float32).view(-1, groups, GROUP_SIZE)
        dots = torch.einsum("mgk,ngk->gmn", qg, codes) - qg.sum(-1).t().unsqueeze(-1)
        outs.append(torch.einsum("gmn,mg,ng->mn", dots, a.to(torch.float32), d))
    y = torch.cat(outs) if outs else x2.new_zeros(0, n)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype)


def _dense_cpu_prepare(prep: PreparedLinear, weight: torch.Tensor) -> None:
    prep.data["w"] = weight


def _dense_cpu(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.nn.functional.linear(x, prep.data["w"], bias)


# ----------------------------------------------------------------------------- NVIDIA paroquant (Triton)
def _paroquant_cuda_prepare(prep: PreparedLinear, t: ParoTensors) -> None:
    # paro_ops owns the layout, tiles, Turing choices and scratch; runs map 1:1 to distinct rotations
    from radiance.kernels import paro_ops

    rots = [(r.pairs, r.theta, r.channel_scales) for r in prep.rotations]
    prep.data["paro"] = paro_ops.prepare([t.qweight], [t.qzeros], [t.scales], rots,  # type: ignore[assignment]
                                         [run.n0 for run in prep.runs[1:]])


def _paroquant_cuda(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import paro_ops

    return paro_ops.forward(prep.data["paro"], x, bias=bias)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- NVIDIA pq2 (Triton)
def _pq2_cuda_prepare(prep: PreparedLinear, t: Pq2Tensors) -> None:
    # pq2_ops owns the layout, launch plans, and the finer choice (M=1 / 2..16 / larger; pq2_table)
    from radiance.kernels import pq2_ops

    prep.data["pq2"] = pq2_ops.prepare(t.qweight, t.scales)  # type: ignore[assignment]


def _pq2_cuda(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    from radiance.kernels import pq2_ops

    y = pq2_ops.forward(prep.data["pq2"], x, kernel_set=prep.kernel_set)  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


# ----------------------------------------------------------------------------- AMD gfx1201 paroquant (HIP)
def _paroquant_rocm_prepare(prep: PreparedLinear, t: ParoTensors) -> None:
    # kernels/hip/layout.py owns the layout (RADIANCE_PQ_WPERM must match the built library)
    from radiance.kernels.hip import layout

    rots = [(r.pairs, r.theta, r.channel_scales) for r in prep.rotations]
    prep.data["hip"] = layout.prepare_merged(  # type: ignore[assignment]
        t.qweight, t.qzeros, t.scales, rots, [run.n0 for run in prep.runs[1:]],
        wperm=knob("RADIANCE_PQ_WPERM") == "1")


def _paroquant_rocm(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # one custom op: rotate+quant (per-group scales in the decode band, per-token above) + the GEMM
    from radiance.kernels.hip import ops as hip_ops

    y = torch.ops.radiance_hip.paroquant_linear(x, *hip_ops.op_args(prep.data["hip"]))  # type: ignore[arg-type]
    return y if bias is None else y + bias.to(y.dtype)


# ----------------------------------------------------------------------------- unquantized (skipped) linears on GPUs
def _dense_gpu_prepare(prep: PreparedLinear, weight: torch.Tensor) -> None:
    prep.data["w"] = weight.contiguous()


def _dense_cuda(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # the skinny split-K Triton GEMM where it applies and RADIANCE_SKINNY_GEMM / the set allow it
    from radiance.kernels import pq2_ops

    return pq2_ops.dense_linear(x, prep.data["w"], bias)


def _dense_rocm(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # no skinny HIP kernel yet: the platform BLAS, as vLLM's own unquantized method would run it
    return torch.nn.functional.linear(x, prep.data["w"], bias)


# ----------------------------------------------------------------------------- the tables
PREPARE: dict[tuple[str, str], Callable] = {
    ("pq2", "cuda"): _pq2_cuda_prepare,
    ("paroquant", "cuda"): _paroquant_cuda_prepare,
    ("paroquant", "cpu"): _paroquant_cpu_prepare,
    ("pq2", "cpu"): _pq2_cpu_prepare,
    ("paroquant_mxfp4", "cpu"): _mxfp4_cpu_prepare,
    ("dense", "cpu"): _dense_cpu_prepare,
}

# paroquant_mxfp4 runs paroquant's CPU forward: the same rotations before a dequantized weight
_CPU_ROWS: dict[str, KernelFn] = {"paroquant": _paroquant_cpu, "paroquant_mxfp4": _paroquant_cpu, "pq2": _pq2_cpu,
                                  "dense": _dense_cpu}

# (method, platform, band, kernel set) -> kernel. GPU rows go here, one line each.
DISPATCH: dict[tuple[str, str, str, str], KernelFn] = {
    (method, "cpu", b, ks): fn for method, fn in _CPU_ROWS.items() for b in BANDS for ks in KERNEL_SETS
}
# paroquant on NVIDIA: paro_ops splits decode (split-K) / prefill (tiled, or scratch+cuBLAS on sm_75)
DISPATCH.update({("paroquant", "cuda", b, "tuned"): _paroquant_cuda for b in BANDS})
# pq2 on NVIDIA: pq2_ops picks DP4A (M=1) / masked-plane tensor-core kernel by pq2_table and the set
DISPATCH.update({("pq2", "cuda", b, ks): _pq2_cuda for b in BANDS for ks in KERNEL_SETS})
# paroquant on AMD gfx1201: the HIP kernels (kernels/hip), both bands inside one op
PREPARE[("paroquant", "rocm")] = _paroquant_rocm_prepare
DISPATCH.update({("paroquant", "rocm", b, "tuned"): _paroquant_rocm for b in BANDS})
# unquantized (skipped) linears on GPUs
PREPARE.update({("dense", "cuda"): _dense_gpu_prepare, ("dense", "rocm"): _dense_gpu_prepare})
DISPATCH.update({("dense", "cuda", b, ks): _dense_cuda for b in BANDS for ks in KERNEL_SETS})
DISPATCH.update({("dense", "rocm", b, ks): _dense_rocm for b in BANDS for ks in KERNEL_SETS})
