"""podman CLI adapter for vllm-switch, setup and the image builds (the CLI, not the API: podman-py's
exec leaves conmon processes waiting over many short calls). In the root package: deploy/ and
images/ both run podman, and images/ depends on no other package.

Every call has a deadline (hostcmd.run): a hung podman fails the caller with the command named.
"""

from __future__ import annotations

import json
import shutil

from radiance import hostcmd

# Quadlet is radiance's installed path from this podman on: every [Container] key the rendered
# `.container` files use (HealthOnFailure, RunInit, Secret, DropCapability, NoNewPrivileges) and
# drop-in directories exist there. Older podman (Debian 12's 4.3) gets the plain `.service`.
QUADLET_MIN_VERSION = (5, 0)


class PodmanError(hostcmd.HostCommandError):
    pass


def available() -> bool:
    return shutil.which("podman") is not None


def run(*args: str, timeout: float | None = None, check: bool = False):
    return hostcmd.run(["podman", *args], timeout=timeout, check=check, error=PodmanError)


def container_exists(name: str) -> bool:
    """True while a container of that name exists in any state (created, running, stopping, exited)."""
    if not available():
        return False
    return run("container", "exists", name).returncode == 0


def image_exists(ref: str) -> bool:
    """The image is in this host's podman store (no registry is asked)."""
    return run("image", "exists", ref).returncode == 0


def container_state(name: str) -> str | None:
    if not available():
        return None
    r = run("container", "inspect", name, "--format", "{{json .State}}")
    if r.returncode != 0:
        return None
    return json.loads(r.stdout).get("Status")


def container_ids() -> dict[str, str]:
    """{full container id: name} of this host's podman containers ({} without podman)."""
    if not available():
        return {}
    r = run("ps", "-a", "--no-trunc", "--format", "{{.ID}} {{.Names}}")
    return dict(line.split(maxsplit=1) for line in r.stdout.splitlines() if " " in line)


def version() -> str | None:
    if not available():
        return None
    r = run("version", "--format", "{{.Client.Version}}")
    return r.stdout.strip() or None if r.returncode == 0 else None


def _version_tuple(ver: str | None) -> tuple[int, int] | None:
    if not ver:
        return None
    try:
        major, minor = (int(x) for x in ver.split(".")[:2])
    except ValueError:
        return None
    return major, minor


def has_quadlet(ver: str | None) -> bool:
    """This podman reads every key of radiance's `.container` files (QUADLET_MIN_VERSION)."""
    v = _version_tuple(ver)
    return v is not None and v >= QUADLET_MIN_VERSION
