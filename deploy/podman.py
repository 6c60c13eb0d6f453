"""podman CLI adapter for vllm-switch (the CLI, not the API: FACTS.md, many short calls)."""

from __future__ import annotations

import json
import shutil
import subprocess


def available() -> bool:
    return shutil.which("podman") is not None


def container_exists(name: str) -> bool:
    """True while a container of that name exists in any state (created, running, stopping, exited)."""
    if not available():
        return False
    return subprocess.run(["podman", "container", "exists", name], capture_output=True).returncode == 0


def container_state(name: str) -> str | None:
    if not available():
        return None
    r = subprocess.run(["podman", "container", "inspect", name, "--format", "{{json .State}}"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout).get("Status")


def version() -> str | None:
    if not available():
        return None
    r = subprocess.run(["podman", "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True)
    return r.stdout.strip() or None if r.returncode == 0 else None


def has_quadlet(ver: str | None) -> bool:
    """Quadlet (`.container` units) needs podman >= 4.4."""
    if not ver:
        return False
    try:
        major, minor = (int(x) for x in ver.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (4, 4)
