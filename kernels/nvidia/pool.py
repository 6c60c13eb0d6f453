"""The one scratch pool of the NVIDIA kernels, per device: fp32 split-K partials, self-resetting int32
tickets (the last program of a tile zeroes its counter) and an fp16 dequantized weight (paroquant's
scratch path). Every method's layers share it: a kernel uses it only within its own launches, one
after another on the stream. Reserved at prepare (load time): allocating inside CUDA-graph capture
would bake a transient address into the graph, so that is refused."""

from __future__ import annotations

from dataclasses import dataclass

import torch

TICKETS = 1 << 16  # output tiles of one split-K launch (pq2's lm_head at 64 rows x 8 tokens: 7760)


@dataclass
class Scratch:
    part: torch.Tensor  # fp32 split-K partials
    cnt: torch.Tensor  # int32 tickets, self-resetting
    deq: torch.Tensor  # fp16 dequantized weight (paroquant's scratch path)


_POOL: dict[torch.device, Scratch] = {}


def _key(device) -> torch.device:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:  # the key tensors' devices have: cuda:<index>
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def reserve(device, part: int = 0, deq: int = 0, tickets: int = TICKETS, what: str = "radiance") -> Scratch:
    """Grow the device's pool to at least these sizes (elements)."""
    device = _key(device)
    cur = _POOL.get(device)
    if cur is not None and cur.part.numel() >= part and cur.deq.numel() >= deq and cur.cnt.numel() >= tickets:
        return cur
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        raise RuntimeError(f"{what} scratch must be reserved before CUDA-graph capture (prepare the layers first)")
    s = Scratch(torch.empty(max(part, cur.part.numel() if cur else 0, 1), dtype=torch.float32, device=device),
                torch.zeros(max(tickets, cur.cnt.numel() if cur else 0), dtype=torch.int32, device=device),
                torch.empty(max(deq, cur.deq.numel() if cur else 0, 1), dtype=torch.float16, device=device))
    _POOL[device] = s
    return s


def get(device, what: str = "radiance") -> Scratch:
    """The device's pool; an error naming `what` where no layer reserved one."""
    s = _POOL.get(_key(device))
    if s is None:
        raise RuntimeError(f"{what}: no scratch reserved on {device}; prepare the layer on the device it runs on")
    return s
