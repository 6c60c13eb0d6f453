"""Compile the NVIDIA kernels for a card that is not here: the real per-layer ops (pq2_ops,
paro_ops: their tables, tiles, launch plans and launchers) run on CPU tensors while every Triton
and Gluon launch compiles for the target GPU and launches nothing.

Why: the users' cards (sm_86, sm_75) are not on the lent device, and the Triton they run is the one
their vLLM image brings, not the device's. This compiles, on any machine with Triton's NVIDIA
backend (no GPU), exactly the kernel variants the tables pick there, and reads from each cubin
what the card would refuse or pay for: shared memory above its per-block limit, registers
spilled to local memory. Nothing computes: kernel outputs are left unwritten, and the one cuBLAS
call of the dequant-to-scratch path (paro_scratch._mm) is skipped.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Card:
    cap: tuple[int, int]
    sms: int
    smem: int  # shared memory one block may opt into, bytes
    name: str


# the users' cards and the lent one; SM counts pick split-K grids, so they are the cards'
CARDS = {
    "sm_75": Card((7, 5), 30, 64 * 1024, "RTX 2060"),
    "sm_86": Card((8, 6), 82, 99 * 1024, "RTX 3090"),
    "sm_90": Card((9, 0), 132, 227 * 1024, "H200"),
}


@dataclass(frozen=True)
class Compiled:
    kernel: str
    shared: int  # bytes the launch asks for
    regs: int
    local: int  # bytes of local memory per thread (spills / stack arrays)
    maxnreg: int  # the register cap the launch asked for (0: the compiler's choice)
    variant: str  # the constexprs and options that make this build


class _OfflineDriver:
    """Triton's active-driver interface as far as compiling needs it: the target, a device key."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return f"offline-{self.target.arch}"  # its own binder cache per target

    def get_current_stream(self, device=None):
        return 0

    def get_active_torch_device(self):
        return torch.device("cpu")


def cuda_tool(name: str) -> str:
    """The path of a CUDA binary Triton ships with its NVIDIA backend (cuobjdump, nvdisasm, ptxas)."""
    import triton

    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


def resource_usage(cubin: bytes) -> dict[str, int]:
    """REG / SHARED / LOCAL / STACK of a cubin's kernel, by the cuobjdump Triton ships."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([cuda_tool("cuobjdump"), "-res-usage", f.name], capture_output=True, text=True,
                             check=True).stdout
    return {k: int(v) for k, v in re.findall(r"(REG|SHARED|LOCAL|STACK):(\d+)", out)}


@contextlib.contextmanager
def compile_only(arch: str):
    """Inside: CPU tensors stand for a `CARDS[arch]` GPU, `kernel[grid](...)` compiles for it
    without launching, and each new build is appended to the yielded list (deduplicated by
    Triton's own kernel cache: one entry per distinct variant)."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import CompiledKernel
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    from radiance.kernels import gpu
    from radiance.kernels.nvidia.dense import skinny
    from radiance.kernels.triton import paro_scratch

    card = CARDS[arch]
    target = GPUTarget("cuda", card.cap[0] * 10 + card.cap[1], 32)
    built: list[Compiled] = []
    seen: set[int] = set()

    def compile_launch(fn, grid):
        def run(*args, **kwargs):
            kernel = fn.run(*args, grid=grid, warmup=True, **kwargs)
            if id(kernel) not in seen:
                seen.add(id(kernel))
                use = resource_usage(kernel.asm["cubin"])
                plain = {k: v for k, v in sorted(kwargs.items()) if isinstance(v, (bool, int, str))}
                built.append(Compiled(fn.__name__, kernel.metadata.shared, use.get("REG", 0),
                                      use.get("LOCAL", 0) + use.get("STACK", 0), kwargs.get("maxnreg", 0), str(plain)))
            return kernel
        return run

    saved = (JITFunction.__getitem__, CompiledKernel.__getitem__, paro_scratch._mm, driver._active)
    # plans made before this block hold kernels it would never see compiled: start without them
    plans = dict(skinny._PLANS)
    skinny._PLANS.clear()
    JITFunction.__getitem__ = compile_launch
    CompiledKernel.__getitem__ = lambda self, grid: (lambda *args, **kwargs: None)  # a plan's later calls
    paro_scratch._mm = lambda a, w, bias, out: None  # cuBLAS: nothing to compile
    driver.set_active(_OfflineDriver(target))
    try:
        with gpu.virtual_gpu(card.cap, card.sms):
            yield built
    finally:
        JITFunction.__getitem__, CompiledKernel.__getitem__, paro_scratch._mm, driver._active = saved
        skinny._PLANS.clear()
        skinny._PLANS.update(plans)
