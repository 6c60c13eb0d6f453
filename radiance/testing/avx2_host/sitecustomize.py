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

import importlib.abc
import importlib.machinery
import os
import sys

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")

_NO = ("_is_avx512_supported", "_is_avx512_vnni_supported", "_is_avx512_bf16_supported", "_is_amx_tile_supported",
       "_is_amx_fp16_supported")


class _PatchTorchCpu(importlib.abc.MetaPathFinder):
    """Patches torch.cpu's capability queries when (and only if) a process imports torch, so a process
    that never does (the launcher's supervisor) stays as small as on a real host."""

    def find_spec(self, name, path, target=None):
        if name != "torch.cpu":
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            for attr in _NO:
                if hasattr(module, attr):
                    setattr(module, attr, lambda: False)

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _PatchTorchCpu())
