"""The CPU linears of every method on whichever GEMM branch vLLM's CPU dispatch takes in this process,
against the exact reference: used in-process by plugin/tests/test_cpu_gemm_branches.py (which forces
the branches it can by patching vLLM's own predicates) and in a subprocess where the branch needs a
process of its own (zentorch: vLLM picks its Zen platform at import; an emulated AVX2 host: vLLM
loads its AVX2 kernel library at import).

`python -m radiance.testing.cpu_branches` prints one JSON line per case.

Tolerance (stated here, asserted by the tests): relative error against reference.py's fp32 result
below 1e-2 in bf16 (the folded weight's and the output's rounding, 2^-9 each, pq2 also its
dequantized activations'; kernels/tests/test_ops.py derives it) and 2e-5 in fp32.
"""

from __future__ import annotations

import json
import sys

import torch

REL = {torch.bfloat16: 1e-2, torch.float32: 2e-5}
METHODS = ("paroquant", "paroquant_mxfp4", "pq2", "dense")
N_PARTS, K = (128, 64, 64), 384  # three partitions (qkv-like, three rotations); weights < 1 MiB: small-GEMM-eligible


def _rotated_parts(method: str, seed: int):
    from radiance.quantize import rtn

    parts = []
    for i, n in enumerate(N_PARTS):
        gen = torch.Generator().manual_seed(seed + i)
        pairs, theta = rtn.random_rotation(K, 4, gen)
        cs = (torch.rand(1, K, generator=gen) + 0.5).half()
        w = torch.randn(n, K, generator=gen) / K**0.5
        make = rtn.paroquant_linear_tensors if method == "paroquant" else rtn.paroquant_mxfp4_linear_tensors
        parts.append(make(w, pairs, theta, cs))
    return parts


def build(method: str, dtype: torch.dtype, seed: int = 0):
    """(prepared CPU linear, reference function x -> y in fp32 without bias)."""
    from radiance.kernels import ops
    from radiance.kernels import reference as R
    from radiance.quantize import rtn

    gen = torch.Generator().manual_seed(seed)
    if method == "pq2":
        t = rtn.pq2_linear_tensors(torch.randn(sum(N_PARTS), K, generator=gen))
        return ops.prepare_parts("pq2", [t]), lambda x: R.pq2_linear(x, t)
    if method == "dense":
        w = (torch.randn(sum(N_PARTS), K, generator=gen) / K**0.5).to(dtype)  # vLLM's weight, in its dtype
        return ops.prepare_parts("dense", [w]), lambda x: x @ w.float().t()
    parts = _rotated_parts(method, seed)
    exact = R.paroquant_linear if method == "paroquant" else R.paroquant_mxfp4_linear
    return ops.prepare_parts(method, parts), lambda x: torch.cat([exact(x, p) for p in parts], 1)


def run_case(method: str, dtype: torch.dtype, rows=(1, 5, 130)) -> dict:
    """Prepare `method` on the CPU path RADIANCE_CPU_WEIGHTS names, hand it to vLLM's GEMM as the
    plugin does, and compare its forward (and, when it is one, the direct GEMM call) with the reference."""
    from radiance.kernels import ops
    from radiance.kernels.cpu_folded import direct_gemm
    from radiance.plugin.cpu_gemm import use_vllm_gemm

    prep, ref = build(method, dtype)
    layer = torch.nn.Module()
    layer.params_dtype = dtype
    layer.bias = torch.nn.Parameter(torch.randn(sum(N_PARTS)).to(dtype), requires_grad=False)
    branch = use_vllm_gemm(layer, prep)
    errs = []
    for m in rows:
        x = torch.randn(m, K).to(dtype)
        want = ref(x.float()) + layer.bias.float()
        outs = [ops.linear_forward(prep, x, layer.bias)]
        direct = direct_gemm(prep)
        if direct is not None:
            outs.append(direct(x, layer.bias))
        for y in outs:
            if y.dtype != dtype or y.shape != want.shape:
                raise AssertionError(f"{method}: output {y.dtype} {tuple(y.shape)}, want {dtype} {tuple(want.shape)}")
            errs.append(float((y.float() - want).norm() / want.norm()))
    return {"method": method, "dtype": str(dtype).removeprefix("torch."), "branch": branch,
            "max_rel": max(errs), "tolerance": REL[dtype]}


def main() -> None:
    """Every method in bf16 and fp32 in this process, as it is (no branch forced): one JSON line each."""
    from radiance.plugin.vllm_int4 import single_rank

    single_rank()
    for dtype in (torch.bfloat16, torch.float32):
        for method in METHODS:
            print(json.dumps(run_case(method, dtype)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
