"""The rendered unit's `podman run` options as podman-py `containers.create` arguments.

One source (UnitSpec) feeds both, so a container made through the API (tests, tools) is the one
the unit would run: same name, labels, mounts, environment, published port, devices, command and
health check (podman's own `--health-on-failure` is the unit's: the API has no portable key for it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from radiance.deploy.unitspec import SHM_SIZE, UnitSpec


def _devices(spec: UnitSpec) -> dict[str, Any]:
    if spec.vendor == "rocm":
        return {"devices": ["/dev/kfd", "/dev/dri"], "group_add": ["video"], "ipc_mode": "host"}
    if spec.vendor == "nvidia":
        return {"devices": ["nvidia.com/gpu=all"], "shm_size": SHM_SIZE}  # CDI, as in the unit
    return {"shm_size": SHM_SIZE}


def prepare_host_dirs(spec: UnitSpec) -> None:
    """What the unit's ExecStartPre does before `podman run`: create the writable mount sources
    (podman does not) and hand them to the container's user."""
    for d in spec.writable_dirs:
        Path(d).mkdir(parents=True, exist_ok=True)
    if spec.user:
        uid, gid = (int(x) for x in spec.user.split(":"))
        for d in spec.writable_dirs:
            for root, dirs, files in os.walk(d):
                for p in (root, *(os.path.join(root, n) for n in dirs + files)):
                    os.lchown(p, uid, gid)


def create_kwargs(spec: UnitSpec) -> dict[str, Any]:
    if spec.runtime != "podman" or not spec.image:
        raise ValueError(f"stack {spec.name!r} is runtime {spec.runtime!r}; only podman stacks have a container")
    mounts = []
    for m in spec.mounts:
        src, dst, opts = m.split(":", 2)
        mode, *label = opts.split(",")
        mounts.append({"type": "bind", "source": src, "target": dst, "read_only": mode == "ro",
                       **({"relabel": label[0]} if label else {})})
    extra: dict[str, Any] = {"user": spec.user} if spec.user else {}
    if spec.health_cmd:  # podman-py takes durations in nanoseconds
        extra["healthcheck"] = {"Test": ["CMD-SHELL", spec.health_cmd], "Interval": spec.health_interval_s * 10**9,
                                "Timeout": spec.health_timeout_s * 10**9, "Retries": spec.health_retries,
                                "StartPeriod": spec.start_timeout_s * 10**9}
    if spec.api_key_file:
        extra["secret_env"] = {"VLLM_API_KEY": spec.secret}
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
        "init": True, "cap_drop": ["all"], "no_new_privileges": True,  # --init --cap-drop all, no-new-privileges
        **extra,
        **_devices(spec),
    }
