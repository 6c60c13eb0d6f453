"""Which NVIDIA GPU a tensor lives on, in one place: its compute capability and SM count.

Every dispatch decision and every "this kernel needs sm_80+ / sm_90" guard of the per-layer ops
asks here. Off CUDA the answer is None (the CPU interpreter tests, the reference path) -- except
inside `virtual_gpu`, which makes CPU tensors stand for a GPU of a given capability. That exists
for one caller: the offline compile check (radiance.testing.offline_compile), which runs the real
ops on CPU tensors while Triton compiles, and launches nothing, for a card that is not here.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

_VIRTUAL: contextvars.ContextVar[tuple[tuple[int, int], int] | None] = contextvars.ContextVar("virtual_gpu", default=None)


def capability(device: torch.device) -> tuple[int, int] | None:
    """(major, minor) of the CUDA device, None off CUDA (CPU tensors inside `virtual_gpu`: its capability)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)
    virtual = _VIRTUAL.get()
    return virtual[0] if virtual is not None and device.type == "cpu" else None


def sm_count(device: torch.device) -> int | None:
    """Streaming multiprocessors of the CUDA device, None off CUDA (inside `virtual_gpu`: its count)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    virtual = _VIRTUAL.get()
    return virtual[1] if virtual is not None and device.type == "cpu" else None


def tile_target(device: torch.device) -> tuple[tuple[int, int], int]:
    """(capability, SM count) the kernel tables choose tiles for; off CUDA (the CPU interpreter)
    the H200's, so the interpreter runs the tiles the H200 would."""
    cap = capability(device)
    return ((9, 0), 132) if cap is None else (cap, sm_count(device))  # type: ignore[return-value]


def arch(device: torch.device) -> str:
    """'sm_86' etc., '' off CUDA."""
    cap = capability(device)
    return f"sm_{cap[0]}{cap[1]}" if cap else ""


@contextlib.contextmanager
def virtual_gpu(cap: tuple[int, int], sms: int):
    """CPU tensors stand for a GPU of this capability and SM count (offline compile check only)."""
    token = _VIRTUAL.set((tuple(cap), int(sms)))
    try:
        yield
    finally:
        _VIRTUAL.reset(token)
