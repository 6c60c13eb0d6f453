"""NVIDIA: which processes hold memory on a GPU, from the driver itself (NVML, nvidia-ml-py).

An open /dev/nvidiaN says nothing: nvidia-persistenced, Xorg and DCGM keep the nodes open for
ever. NVML's running *compute* processes per GPU are the processes with a CUDA context there, each
with its memory; a desktop's Xorg is a graphics process and is not listed.

GPU indices are CUDA's under `CUDA_DEVICE_ORDER=PCI_BUS_ID` (every rendered NVIDIA unit sets it):
the i-th GPU by PCI bus id. NVML's own enumeration order carries no such promise, so the GPUs are
sorted by bus id here, and each is named by UUID and bus id in messages.
"""

from __future__ import annotations

import contextlib

from radiance.deploy.gpus import GpuQueryError, GpuUser


def _nvml():
    try:
        import pynvml
    except ImportError:
        raise GpuQueryError("nvidia-ml-py is not installed in this environment (pip install nvidia-ml-py); "
                            "vllm-switch reads NVIDIA GPU memory users through it") from None
    return pynvml


def _text(v: bytes | str) -> str:
    return v.decode() if isinstance(v, bytes) else v


def devices_by_bus_id(nvml) -> list[tuple[str, str, object]]:
    """[(PCI bus id, UUID, handle)] sorted by bus id: index i is CUDA's device i under PCI_BUS_ID."""
    out = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        out.append((_text(nvml.nvmlDeviceGetPciInfo(h).busId).lower(), _text(nvml.nvmlDeviceGetUUID(h)), h))
    return sorted(out, key=lambda d: d[0])


@contextlib.contextmanager
def _session():
    """NVML initialised for one query; its errors become GpuQueryError."""
    nvml = _nvml()
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        raise GpuQueryError(f"NVML cannot start ({e}): is the NVIDIA driver loaded (nvidia-smi works)?") from None
    try:
        yield nvml
    except nvml.NVMLError as e:
        raise GpuQueryError(f"NVML query failed: {e}") from None
    finally:
        nvml.nvmlShutdown()


def describe() -> str:
    """'driver X, N GPU(s)' when NVML answers (what `radiance setup` checks); GpuQueryError if not."""
    with _session() as nvml:
        return f"NVML: driver {_text(nvml.nvmlSystemGetDriverVersion())}, {nvml.nvmlDeviceGetCount()} GPU(s)"


def users(gpus: list[int]) -> list[GpuUser]:
    """Processes with a CUDA context (and memory) on the given GPUs."""
    with _session() as nvml:
        devs = devices_by_bus_id(nvml)
        out = []
        for g in gpus:
            if g >= len(devs):
                raise GpuQueryError(f"GPU {g}: the driver sees {len(devs)} NVIDIA GPU(s) (indices 0..{len(devs) - 1} "
                                    f"in PCI bus order); fix the stack's `devices`")
            bus, uuid, h = devs[g]
            for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                out.append(GpuUser(pid=int(p.pid), gpu=g, device=f"{uuid} at {bus}", used_bytes=p.usedGpuMemory))
        return out
