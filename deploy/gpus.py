"""Is a stack's GPU memory released? (llama-swap #97: a stopped server's VRAM not yet freed.)

Read from the driver's own accounting of GPU memory, per GPU: NVML's running compute processes on
NVIDIA (gpu_nvml.py), KFD's per-process VRAM on AMD (gpu_kfd.py). Daemons that merely keep the
device nodes open (nvidia-persistenced, Xorg, DCGM, ROCm tools) hold no compute memory and are not
users. PIDs are the host's, so containers' processes are seen (and named) from the host.
"""

from __future__ import annotations

from dataclasses import dataclass

from radiance.deploy import procs


class GpuQueryError(RuntimeError):
    """The driver's view of GPU memory cannot be read; the message says what to install or check."""


@dataclass(frozen=True)
class GpuUser:
    pid: int  # as the driver reports it (the host's PID namespace)
    gpu: int  # the stack's index (CUDA under PCI_BUS_ID order / HIP)
    device: str  # how the driver names that GPU (UUID and PCI bus id, or KFD gpu_id and bus id)
    used_bytes: int | None  # None where the driver does not account it


@dataclass(frozen=True)
class GpuHolder:
    holder: procs.Holder
    use: GpuUser

    def describe(self) -> str:
        mem = f"{self.use.used_bytes / 2**20:.0f} MiB" if self.use.used_bytes is not None else "memory"
        return f"{self.holder.describe()} with {mem} on GPU {self.use.gpu} ({self.use.device})"


def users(vendor: str, gpus: list[int]) -> list[GpuUser]:
    """The driver's list of processes holding memory on these GPUs; [] for a CPU stack."""
    if not gpus or vendor == "cpu":
        return []
    if vendor == "nvidia":
        from radiance.deploy import gpu_nvml

        return gpu_nvml.users(gpus)
    if vendor == "rocm":
        from radiance.deploy import gpu_kfd

        return gpu_kfd.users(gpus)
    raise ValueError(f"unknown GPU vendor {vendor!r}: expected rocm, nvidia or cpu")


def holders(vendor: str, gpus: list[int]) -> list[GpuHolder]:
    """`users` with each PID's name and cgroup from /proc (who owns it: a stack's unit or container)."""
    return [GpuHolder(procs.process(u.pid), u) for u in users(vendor, gpus)]
