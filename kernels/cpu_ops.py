"""The per-layer ops on CPU: the folded fast path (kernels/cpu_folded.py), or the exact reference
bit for bit (RADIANCE_CPU_WEIGHTS=fp32 / int8; kernels/tests/test_ops.py checks the equality).
The methods' "cpu" entries (kernels/methods/) name these: paroquant_mxfp4 runs paroquant's forward,
the same rotations before a dequantized weight."""

from __future__ import annotations

import torch

from radiance.kernels import cpu_folded, reference
from radiance.kernels.formats.paroquant import GROUP_SIZE, ParoTensors, unpack_awq
from radiance.kernels.formats.paroquant_mxfp4 import Mxfp4Tensors
from radiance.kernels.formats.pq2 import Pq2Tensors, unpack_ternary
from radiance.kernels.linear import PreparedLinear, check_partitions, rotate_all


def paroquant_prepare(prep: PreparedLinear, t: ParoTensors) -> None:
    mode = prep.config.cpu_weights
    if mode in ("folded", "int4"):
        return (cpu_folded.prepare_paroquant if mode == "folded" else cpu_folded.prepare_rotated)(prep, t)
    # (q - z) as int8 [N, K] and fp32 scales. RADIANCE_CPU_WEIGHTS=fp32 builds the dequantized
    # weight once from them (the same ops as the per-call rebuild, so the same bits) and keeps it.
    q = unpack_awq(t.qweight).to(torch.int16)
    z = unpack_awq(t.qzeros).to(torch.int16).repeat_interleave(GROUP_SIZE, dim=0)
    prep.data["qz"] = (q - z).to(torch.int8).t().contiguous()
    prep.data["s"] = t.scales.to(torch.float32).t().contiguous()  # [N, G]
    if mode == "fp32":
        prep.data["w"] = _paroquant_weight_cpu(prep, 0, prep.out_features)
        del prep.data["qz"], prep.data["s"]


def mxfp4_prepare(prep: PreparedLinear, t: Mxfp4Tensors) -> None:
    if prep.config.cpu_weights in ("folded", "int4"):
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


def paroquant_forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if prep.run_gemms:
        return cpu_folded.rotated_linear(prep, x, bias)
    if "qz" not in prep.data and "w" not in prep.data:
        return cpu_folded.paroquant_linear(prep, x, bias)
    return _paroquant_gemm_cpu(prep, rotate_all(prep, x), bias, x.dtype)


def pq2_prepare(prep: PreparedLinear, t: Pq2Tensors) -> None:
    if prep.config.cpu_weights in ("folded", "int4"):  # ternary codes take no int4 GEMM: int4 runs folded too
        return cpu_folded.prepare_pq2(prep, t)
    n, groups = (int(s) for s in t.scales.shape)
    codes = unpack_ternary(t.qweight).view(n, groups, GROUP_SIZE)  # uint8 0..2
    prep.data["codes"] = codes.to(torch.float32) if prep.config.cpu_weights == "fp32" else codes
    prep.data["d"] = t.scales.to(torch.float32)


def pq2_forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None, chunk_rows: int = 256) -> torch.Tensor:
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


def dense_prepare(prep: PreparedLinear, weight: torch.Tensor) -> None:
    prep.data[cpu_folded.DENSE] = weight


def dense_forward(prep: PreparedLinear, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    if prep.gemm is not None:  # vLLM's own CPU GEMM, handed over by the plugin
        return prep.gemm(x, bias)
    return torch.nn.functional.linear(x, prep.data[cpu_folded.DENSE], bias)
