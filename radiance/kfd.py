"""The AMD GPUs the amdgpu driver's KFD lists in sysfs, in HIP's order (no ROCm install needed).

`<kfd>/topology/nodes/<n>/` has one directory per agent; GPU nodes have a non-zero `gpu_id` and a
`properties` file with the PCI address (`domain`, `location_id` = bus << 8 | dev << 3 | fn) and the
ISA (`gfx_target_version` = major * 10000 + minor * 100 + stepping, e.g. 120001 for gfx1201). The
i-th GPU node is HIP's device i (before HIP_VISIBLE_DEVICES picks among them): the order rocminfo
and the ROCm runtime enumerate agents in. Read by the launcher (which GPU a stack gets) and by
vllm-switch (deploy/gpu_kfd.py: which processes hold VRAM on it). /sys is visible in containers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

KFD = Path("/sys/class/kfd/kfd")


class KfdError(RuntimeError):
    """KFD's topology cannot be read; the message says what to check."""


@dataclass(frozen=True)
class AmdGpu:
    gpu_id: int  # KFD's id of the GPU (the name of its per-process vram_<gpu_id> file)
    bus: str  # PCI address, e.g. 0000:03:00.0
    gfx: str  # ISA, e.g. gfx1201 ("" when the driver does not say)

    def describe(self) -> str:
        return f"{self.gfx or 'unknown gfx'} (gpu_id {self.gpu_id} at {self.bus})"


def _properties(node: Path) -> dict[str, str]:
    try:
        text = (node / "properties").read_text()
    except OSError:
        return {}
    return {k: v.strip() for k, _, v in (line.partition(" ") for line in text.splitlines())}


def _bus(props: dict[str, str]) -> str:
    try:
        loc, dom = int(props["location_id"]), int(props.get("domain", "0"))
    except (KeyError, ValueError):
        return "unknown bus"
    return f"{dom:04x}:{loc >> 8 & 0xff:02x}:{loc >> 3 & 0x1f:02x}.{loc & 7}"


def _gfx(props: dict[str, str]) -> str:
    try:
        v = int(props["gfx_target_version"])
    except (KeyError, ValueError):
        return ""
    return f"gfx{v // 10000}{v // 100 % 100:x}{v % 100:x}" if v else ""


def gpus(root: Path | None = None) -> list[AmdGpu]:
    """The GPU nodes in topology order: index i is HIP's device i."""
    nodes = (root or KFD) / "topology" / "nodes"
    if not nodes.is_dir():
        raise KfdError(f"{nodes} does not exist: the amdgpu driver (KFD) is not loaded, or this is no AMD host")
    out = []
    for node in sorted((p for p in nodes.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        try:
            gid = int((node / "gpu_id").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if gid:  # CPU nodes have gpu_id 0
            props = _properties(node)
            out.append(AmdGpu(gpu_id=gid, bus=_bus(props), gfx=_gfx(props)))
    return out
