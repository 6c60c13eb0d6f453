"""The bind mounts a podman stack's container needs, so the launcher inside sees the host's paths.

Every mount is an identity mount (host path = container path): the stack file, the model and
drafter (read-only), the stack's own kernel and compile caches and the launcher's state records
(writable; nothing else of the host's state: not the switch lock, not other stacks' caches). A path means the same
thing on both sides, so the launcher inside the container resolves the same plan as `--dry-run` on
the host. The unit renderer calls `container_mounts`; nothing else decides what is mounted.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from radiance.locations import StackPaths


@dataclass(frozen=True)
class Mount:
    path: Path  # the same on the host and in the container
    readonly: bool

    def podman_arg(self) -> str:
        """`-v` value for podman run / Quadlet `Volume=`."""
        return f"{self.path}:{self.path}:{'ro' if self.readonly else 'rw'}"


def covering(mounts: tuple[Mount, ...] | list[Mount], p: Path) -> Mount | None:
    """The mount under which `p` already lies, if any."""
    for m in mounts:
        if p == m.path or m.path in p.parents:
            return m
    return None


def container_mounts(sp: StackPaths) -> tuple[Mount, ...]:
    """Mounts for a podman stack; the chat template gets its own read-only bind only when it is
    not already under one of the others (template.bind decides, and it is listed here)."""
    from radiance.launcher.template import template_mount

    mounts: list[Mount] = [Mount(sp.stack_file, True), Mount(sp.model, True)]
    if sp.drafter is not None:
        mounts.append(Mount(sp.drafter, True))
    for writable in (sp.kernel_cache, sp.compile_root, sp.launch_records):
        if covering(mounts, writable) is None:
            mounts.append(Mount(writable, False))
    extra = template_mount(sp.chat_template, tuple(mounts))
    if extra is not None:
        mounts.append(extra)
    return tuple(mounts)
