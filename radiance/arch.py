"""The one arch map, with no dependencies: the kernel side imports it where pydantic (the stack
schema's) is not installed, e.g. a GPU box that only runs the kernels and their tests."""

from __future__ import annotations


def vendor(arch: str) -> str:
    """`cpu`, `rocm` (AMD gfx targets) or `nvidia` (sm_XY)."""
    if arch == "cpu":
        return "cpu"
    if arch.startswith("gfx"):
        return "rocm"
    if arch.startswith("sm_"):
        return "nvidia"
    raise ValueError(f"arch {arch!r}: expected cpu, an AMD gfx target or an NVIDIA sm_XY (e.g. gfx1201, sm_86)")
