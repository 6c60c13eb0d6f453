"""The rendered unit's `podman run` options as podman-py `containers.create` arguments.

One source (UnitSpec) feeds both, so a container made through the API (tests, tools) is the one
the unit would run: same name, labels, mounts, environment, published port, devices and command.
"""

from __future__ import annotations

from typing import Any

from radiance.deploy.unitspec import SHM_SIZE, UnitSpec


def _devices(spec: UnitSpec) -> dict[str, Any]:
    if spec.vendor == "rocm":
        return {"devices": ["/dev/kfd", "/dev/dri"], "group_add": ["video"], "ipc_mode": "host"}
    if spec.vendor == "nvidia":
        return {"devices": ["nvidia.com/gpu=all"], "shm_size": SHM_SIZE}  # CDI, as in the unit
    return {"shm_size": SHM_SIZE}


def create_kwargs(spec: UnitSpec) -> dict[str, Any]:
    if spec.runtime != "podman" or not spec.image:
        raise ValueError(f"stack {spec.name!r} is runtime {spec.runtime!r}; only podman stacks have a container")
    mounts = []
    for m in spec.mounts:
        src, dst, mode = m.rsplit(":", 2)
        mounts.append({"type": "bind", "source": src, "target": dst, "read_only": mode == "ro"})
    return {
        "image": spec.image,
        "command": list(spec.command),
        "name": spec.container,
        "labels": dict(spec.labels),
        "environment": dict(spec.env),
        "mounts": mounts,
        "ports": {f"{spec.port}/tcp": (spec.host, spec.port)},
        "stop_timeout": spec.stop_grace_s,
        "auto_remove": True,  # the unit's --rm: a stopped stack leaves no container behind
        **_devices(spec),
    }
