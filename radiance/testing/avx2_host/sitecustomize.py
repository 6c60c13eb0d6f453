"""Emulates an AVX2-only x86 host (most desktops and laptops) on an AVX-512 machine, for tests and
benchmarks: put this folder first on PYTHONPATH and every Python process of a vLLM server (API
server, engine core, workers) starts as if the CPU had no AVX-512, AVX-512 BF16 or AMX.

What it changes, and so what it makes real: oneDNN (torch's and vLLM's) is capped at AVX2
(`ONEDNN_MAX_CPU_ISA`), so a bf16 matmul primitive cannot be created, as on such a CPU; ATen's
vectorized kernels dispatch at AVX2 (`ATEN_CPU_CAPABILITY`); torch.cpu's capability queries answer
no for AVX-512, AVX-512 BF16 and AMX, so vLLM loads its AVX2 kernel library (`_C_AVX2`) and its CPU
GEMM dispatch takes the branches such a CPU takes. What it cannot change: torch's C++ checks read
the CPU's own flags (cpuinfo), e.g. whether torch's bf16 matmul goes through oneDNN; code under
test must ask torch.cpu (or oneDNN), as vLLM does.
"""

import os

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ["RADIANCE_EMULATED_CPU"] = "avx2"  # so a log or a result says the host was emulated

try:
    import torch.cpu as _cpu
except ImportError:  # an interpreter without torch (a launcher shim) has nothing to emulate
    pass
else:
    for _name in ("_is_avx512_supported", "_is_avx512_vnni_supported", "_is_avx512_bf16_supported",
                  "_is_amx_tile_supported", "_is_amx_fp16_supported"):
        if hasattr(_cpu, _name):
            setattr(_cpu, _name, lambda: False)
