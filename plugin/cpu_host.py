"""What this CPU gives a CPU stack: its instruction set, the dtype to serve in, and which of vLLM's
CPU GEMMs each kind of linear will run on (and why). `radiance-launch` logs it before vLLM starts;
the worker's own choice is made by the same code (plugin/cpu_gemm.py), so the log is what runs.

The dtype: where oneDNN builds a bf16 matmul (AVX-512 and newer) bf16 is fastest at every batch. On
CPUs without AVX-512 (most desktops) vLLM's bf16 linears fall back to torch's GEMM, whose cost grows
with the rows of the batch, while fp32 runs on oneDNN at twice the weight bytes: measured on an AVX2
host (docs/perf.md), bf16 decodes one sequence fastest and fp32 several. So such a host serves
bf16 when the stack runs one sequence at a time (max_num_seqs 1) and fp32 otherwise; a stack's
explicit `dtype` always wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import torch

from radiance.plugin.cpu_gemm import vllm_gemm

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
_SMALL = (1024, 1024)  # a weight over the small-GEMM kernel's 1 MiB bound: what every larger linear takes


INT4_MISSING = ("RADIANCE_CPU_WEIGHTS=int4: this vLLM build has no CPU int4 GEMM for this CPU (vLLM ships "
                "cpu_gemm_wna16 in its AVX-512 kernels only); serve RADIANCE_CPU_WEIGHTS=folded (the default)")


VLLM_INT4_METHODS = ("awq", "gptq")  # vLLM's own int4 methods: CPUWNA16 on CPU


class CpuPathError(RuntimeError):
    """A CPU stack asks for a path this CPU / vLLM build does not have; the message says what to use."""


def int4_gemm_available() -> bool:
    import vllm._custom_ops  # noqa: F401  (loads vLLM's kernel library for this CPU)

    return hasattr(torch.ops._C, "cpu_gemm_wna16")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def isa() -> str:
    """The instruction-set tier vLLM's CPU kernels see (torch.cpu's queries, as vLLM asks them)."""
    c = torch.cpu
    if c._is_amx_tile_supported():
        return "AMX"
    if c._is_avx512_bf16_supported():
        return "AVX-512 BF16"
    if c._is_avx512_supported():
        return "AVX-512"
    return torch.backends.cpu.get_cpu_capability()  # e.g. AVX2


def onednn_builds(dtype: torch.dtype) -> bool:
    """Whether vLLM's oneDNN matmul exists for `dtype` here (honours ONEDNN_MAX_CPU_ISA, as vLLM does)."""
    import vllm._custom_ops as ops

    try:
        ops.create_onednn_mm(torch.zeros(_SMALL, dtype=dtype).t(), 32)
    except RuntimeError:
        return False
    return True


def serving_dtype(stack_dtype: str, max_num_seqs: int | None) -> tuple[str, str]:
    """(dtype for vLLM's --dtype, or "auto" to leave vLLM's choice; why)."""
    if stack_dtype != "auto":
        return stack_dtype, "the stack's `dtype`"
    if onednn_builds(torch.bfloat16):
        return "auto", "oneDNN has a bf16 matmul on this CPU"
    if max_num_seqs == 1:
        return "auto", ("no bf16 matmul in oneDNN on this CPU, but one sequence at a time (max_num_seqs 1) decodes "
                        "fastest in bf16 on torch's GEMM (half fp32's weight bytes)")
    return "float32", ("no bf16 matmul in oneDNN on this CPU: torch's bf16 GEMM slows with every row of a batch, "
                       "oneDNN's fp32 does not (set `dtype: bfloat16` for the fastest single sequence)")


@dataclass
class CpuPlan:
    cpu: str
    isa: str
    emulated: str | None  # what the CPU itself has where torch / oneDNN are capped below it
    dtype: str  # what the launcher passes (auto: vLLM's default, bf16 for these checkpoints)
    dtype_why: str
    paths: list[tuple[str, str]] = field(default_factory=list)  # (which linears, what runs them and why)

    def lines(self) -> list[str]:
        emu = f" (capped: the CPU itself has {self.emulated})" if self.emulated else ""
        shown = "bfloat16 (vLLM's default)" if self.dtype == "auto" else self.dtype
        return [f"cpu: {self.cpu}, {self.isa}{emu}; serving dtype {shown}: {self.dtype_why}",
                *(f"cpu gemm: {what}: {how}" for what, how in self.paths)]


def _branch(dtype: torch.dtype) -> str:
    _, branch = vllm_gemm(torch.zeros(_SMALL, dtype=dtype), None)
    why = {"onednn": "vLLM's oneDNN matmul on a prepacked weight",
           "torch": "torch's F.linear (vLLM's fallback: oneDNN has no matmul for this dtype here)",
           "zentorch": "zentorch (vLLM's Zen platform)",
           "small-gemm": "vLLM's small-GEMM kernel"}[branch]
    return f"{branch} — {why}"


def plan(quant: str, cpu_weights: str, stack_dtype: str, max_num_seqs: int | None,
         plugin_methods: frozenset[str] | set[str]) -> CpuPlan:
    """The CPU facts and paths for a stack serving `quant` with RADIANCE_CPU_WEIGHTS=`cpu_weights`."""
    dtype, why = serving_dtype(stack_dtype, max_num_seqs)
    torch_dtype = DTYPES.get(dtype, torch.bfloat16)
    name = str(torch_dtype).removeprefix("torch.")
    unquantized = _branch(torch_dtype)
    paths = [("unquantized linears (lm_head, skipped layers)", unquantized)]
    if quant in VLLM_INT4_METHODS and not int4_gemm_available():
        raise CpuPathError(f"quant {quant}: vLLM serves it on CPU with its int4 GEMM (cpu_gemm_wna16), which this vLLM "
                           "build has only for AVX-512 CPUs; on this CPU serve a radiance checkpoint "
                           "(`radiance quantize … --format paroquant`, RADIANCE_CPU_WEIGHTS=folded)")
    if quant in plugin_methods:
        if cpu_weights in ("fp32", "int8"):
            paths.append((quant, f"the exact reference in fp32 (RADIANCE_CPU_WEIGHTS={cpu_weights}: the judge, slow)"))
        elif cpu_weights == "int4" and quant == "paroquant":
            if not int4_gemm_available():
                raise CpuPathError(INT4_MISSING)
            if torch_dtype == torch.float32:
                raise CpuPathError("RADIANCE_CPU_WEIGHTS=int4: vLLM's CPU int4 GEMM takes 16-bit activations but this "
                                   f"stack serves float32 ({why}); serve RADIANCE_CPU_WEIGHTS=folded (the default)")
            paths.append((quant, f"vLLM's CPU int4 GEMM on the codes, activations rotated per call in {name} "
                                 "(RADIANCE_CPU_WEIGHTS=int4)"))
        else:
            paths.append((quant, f"one GEMM per linear on the folded {name} weight (RADIANCE_CPU_WEIGHTS="
                                 f"{cpu_weights}): {unquantized}"))
    return CpuPlan(cpu_name(), isa(), _capped(), dtype, why, paths)


def _capped() -> str | None:
    """Where torch and oneDNN see less than the CPU has (ONEDNN_MAX_CPU_ISA, or an emulated older
    CPU: radiance/testing/avx2_host), what the CPU itself reports."""
    try:
        flags = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")).split()
    except (OSError, StopIteration):
        return None
    if "avx512f" in flags and not torch.cpu._is_avx512_supported():
        return "AVX-512"
    return None
