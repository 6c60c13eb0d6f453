"""What the kernel warm-up is asked to build, without torch: the launcher and `radiance setup`
(which run where no torch is installed) pass these to `python -m radiance.kernels.warmup`."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from radiance.knobs import KNOBS


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


def build_flag(specs: list[LinearSpec], env: dict[str, str]) -> str:
    """The kernel-build key's part for a warm-up: its specs and the knobs that key the kernel build
    (radiance/knobs.py: `kernels`)."""
    knobs = sorted((k, v) for k, v in env.items() if k in KNOBS and KNOBS[k].kernels)
    h = hashlib.sha256((specs_json(specs) + json.dumps(knobs)).encode()).hexdigest()[:16]
    return f"warm={len(specs)}x{h}"
