"""AMD: which processes hold memory on a GPU, from the amdgpu driver's KFD accounting in sysfs.

Any ROCm tool opens /dev/kfd (one node for every AMD GPU), so an open node says nothing. KFD keeps
one directory per process that uses the compute driver, `<kfd>/proc/<pid>/`, with one
`vram_<gpu_id>` file per GPU giving the bytes of VRAM that process holds there; a process holding
none (a monitoring tool) is not a user.

GPU indices are HIP's: the i-th GPU node of KFD's topology (radiance/kfd.py), which is the order the
ROCm runtime enumerates agents in.
"""

from __future__ import annotations

from pathlib import Path

from radiance import kfd
from radiance.deploy.gpus import GpuQueryError, GpuUser
from radiance.kfd import KFD


def _read_int(p: Path) -> int | None:
    try:
        return int(p.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def gpu_nodes(root: Path | None = None) -> list[tuple[int, str]]:
    """[(gpu_id, PCI bus id)] of the GPU nodes in topology order: index i is HIP's device i."""
    try:
        return [(g.gpu_id, g.bus) for g in kfd.gpus(root or KFD)]
    except kfd.KfdError as e:
        raise GpuQueryError(str(e)) from None


def users(gpus: list[int], root: Path | None = None) -> list[GpuUser]:
    """Processes holding VRAM on the given GPUs."""
    root = root or KFD
    nodes = gpu_nodes(root)
    wanted = {}
    for g in gpus:
        if g >= len(nodes):
            raise GpuQueryError(f"GPU {g}: KFD lists {len(nodes)} AMD GPU(s) (indices 0..{len(nodes) - 1}); "
                                f"fix the stack's `devices`")
        wanted[g] = nodes[g]
    out = []
    procs = root / "proc"
    for d in sorted(procs.iterdir() if procs.is_dir() else [], key=lambda p: p.name):
        if not d.name.isdigit():
            continue
        for g, (gid, bus) in wanted.items():
            used = _read_int(d / f"vram_{gid}")
            if used:  # missing (the process exited meanwhile) or 0 (no memory there): not a user
                out.append(GpuUser(pid=int(d.name), gpu=g, device=f"gpu_id {gid} at {bus}", used_bytes=used))
    return out
