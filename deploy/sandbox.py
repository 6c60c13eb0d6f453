"""The sandbox a native stack's unit runs vLLM in: who it runs as and what it may touch.

A podman stack is confined by its container (user 10001, no capabilities, identity mounts); a
native stack gets the same from systemd: `User=` (the system layout's `radiance` user, which
`radiance setup --system` creates; in the user layout whoever rendered the units), the whole file
system read-only (`ProtectSystem=strict`, `ProtectHome=read-only`) except the stack's caches and
radiance's state (`ReadWritePaths=`), the checkpoint and drafter read-only even where the state
directory holds them, a private /tmp, no capabilities, and of the device nodes only the GPUs'
(`DevicePolicy=closed` + `DeviceAllow=`: the vendor's device classes; the stack's `devices` pick
among its GPUs through the visibility variables, launcher/device.py).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from pathlib import Path

from radiance import paths
from radiance.locations import StackPaths
from radiance.stack import Stack

SYSTEM_USER = "radiance"
STATE_BASE, CACHE_BASE = Path("/var/lib"), Path("/var/cache")  # systemd's StateDirectory= / CacheDirectory= roots
# Device classes of /proc/devices (systemd globs them): NVIDIA's control, per-GPU and UVM nodes;
# AMD's compute node and the DRM render nodes. The stack's GPUs are chosen by the visibility
# variables; these keep every other device out.
DEVICE_ALLOW = {"nvidia": ["char-nvidia* rw"], "rocm": ["char-kfd rw", "char-drm rw"], "cpu": []}
# vLLM and Hugging Face keep their own caches and settings under the user's home.
HOME_DIRS = (".cache", ".config")
# /dev/kfd and /dev/dri/renderD* belong to these groups on Debian/Ubuntu/Fedora.
GROUPS = {"rocm": ["video", "render"]}
PRIVATE_TMP = (Path("/tmp"), Path("/var/tmp"))  # PrivateTmp=yes gives the unit its own of both


@dataclass(frozen=True)
class Sandbox:
    user: str
    groups: list[str]
    writable: list[str]  # absolute: what the service writes
    read_only: list[str]
    device_allow: list[str]

    def _under(self, base: Path) -> list[str]:
        return [str(Path(p).relative_to(base)) for p in self.writable if Path(p).is_relative_to(base)]

    @property
    def state_dirs(self) -> list[str]:
        """StateDirectory= entries: systemd creates them owned by `user` (only them, not their parents)."""
        return self._under(STATE_BASE)

    @property
    def cache_dirs(self) -> list[str]:
        return self._under(CACHE_BASE)

    @property
    def read_write(self) -> list[str]:
        """Writable paths outside /var/lib and /var/cache (the user layout's): `radiance render` creates them."""
        return [p for p in self.writable if not (Path(p).is_relative_to(STATE_BASE) or Path(p).is_relative_to(CACHE_BASE))]


def launcher_visible(stack_name: str, launcher: str) -> None:
    """Raise ValueError where the unit's private /tmp hides `launcher` (installed below /tmp or
    /var/tmp): systemd would fail to exec it (status=203/EXEC) and restart it until the start limit."""
    p = Path(launcher)
    if any(p == t or t in p.parents for t in PRIVATE_TMP):
        raise ValueError(f"stack {stack_name!r}: radiance-launch is at {launcher}, under a directory its native unit "
                         f"cannot see (PrivateTmp=yes hides {', '.join(map(str, PRIVATE_TMP))}); install radiance "
                         "elsewhere or pass --launcher with its path")


def service_user(system: bool) -> str:
    return SYSTEM_USER if system else getpass.getuser()


def _home(system: bool) -> Path:
    """The service user's home (systemd's %h is root's home in the system manager, whatever User= says)."""
    from radiance.deploy.layout import SYSTEM_HOME

    return SYSTEM_HOME if system else Path.home()


def native_sandbox(stack: Stack, sp: StackPaths, system: bool) -> Sandbox:
    """Writable: what the launcher and vLLM write (the launch and ready records, the compile and
    kernel caches) and vLLM's and Hugging Face's own caches and settings in the user's home; nothing
    else, and no recursive change of ownership beyond those (the state directory also holds
    checkpoints, which stay root's and read-only). In the system layout that home is the state
    directory (`radiance setup` creates the user so), and systemd makes the directories under
    /var/lib and /var/cache (StateDirectory=, CacheDirectory=)."""
    state, home = paths.state_dir(), _home(system)
    writable = [str(p) for p in (state / "launch", state / "ready", sp.compile_root, sp.kernel_cache,
                                 *(home / d for d in HOME_DIRS))]
    ro = [str(p) for p in (sp.model, sp.drafter) if p is not None]
    return Sandbox(user=service_user(system), groups=GROUPS.get(stack.vendor, []),
                   writable=list(dict.fromkeys(writable)), read_only=ro, device_allow=DEVICE_ALLOW[stack.vendor])
