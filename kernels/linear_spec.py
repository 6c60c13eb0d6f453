"""What the kernel warm-up is asked to build, without torch: the launcher and `radiance setup`
(which run where no torch is installed) pass these to `python -m radiance.kernels.warmup`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass


NO_GPU = 3  # the warm-up process's exit status when it sees no CUDA device


@dataclass(frozen=True)
class LinearSpec:
    """What decides which kernels a linear runs: method, output columns per distinct rotation
    (paroquant; one entry otherwise), input features, bias, activation dtype."""

    method: str  # kernels/methods: METHODS
    sizes: tuple[int, ...]
    k: int
    bias: bool
    dtype: str  # bfloat16 | float16

    @property
    def n(self) -> int:
        return sum(self.sizes)


def specs_json(specs: list[LinearSpec]) -> str:
    return json.dumps([asdict(s) for s in specs], sort_keys=True)


# knobs that change nothing about which kernels run (paths, the eval-mode judge)
_NOT_KERNEL_KNOBS = ("RADIANCE_HOME", "RADIANCE_KERNEL_DIR", "RADIANCE_PQ_CHECKALL", "RADIANCE_PQ_CHECK_MAX_M",
                     "RADIANCE_PQ_CHECK_MAX_CALLS")


def build_flag(specs: list[LinearSpec], env: dict[str, str]) -> str:
    """The kernel-build key's part for a warm-up: its specs and the knobs the tables read."""
    knobs = sorted((k, v) for k, v in env.items() if k.startswith("RADIANCE_") and k not in _NOT_KERNEL_KNOBS)
    h = hashlib.sha256((specs_json(specs) + json.dumps(knobs)).encode()).hexdigest()[:16]
    return f"warm={len(specs)}x{h}"
