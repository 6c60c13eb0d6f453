"""Is a stack's GPU memory released? (llama-swap #97: a stopped server's VRAM not yet freed.)

The driver frees a process's GPU memory when the process closes the device, so "released" is read
as "no process has the stack's GPU device nodes open": /dev/kfd for ROCm (one node for all AMD
GPUs), /dev/nvidia<N> for NVIDIA. Vendor-neutral, and it sees containers' processes from the host.
"""

from __future__ import annotations

from pathlib import Path

from radiance.deploy.procs import Holder, file_holders


def device_nodes(vendor: str, gpus: list[int], dev: Path = Path("/dev")) -> list[str]:
    """The device nodes whose holders own the stack's GPU memory; [] when the stack uses none."""
    if not gpus or vendor == "cpu":
        return []
    if vendor == "rocm":
        return [str(dev / "kfd")]
    if vendor in ("nvidia", "cuda"):
        return [str(dev / f"nvidia{g}") for g in gpus]
    raise ValueError(f"unknown GPU vendor {vendor!r}: expected rocm, nvidia or cpu")


def gpu_holders(vendor: str, gpus: list[int], dev: Path = Path("/dev")) -> list[Holder]:
    nodes = [n for n in device_nodes(vendor, gpus, dev) if Path(n).exists()]
    return file_holders(nodes) if nodes else []
