"""What runs on this host right now, read from systemd, podman and /proc at the moment of asking.

Nothing here is cached or read from a file a crash could leave stale: `vllm-switch` killed with -9
and run again sees the truth and converges.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from radiance import podman_cli as podman
from radiance.deploy import gpus, procs, systemd
from radiance.deploy.unitspec import conflicts, unit_name
from radiance.stack import StackFile

# Processes podman runs for a container that can hold its published port on the host.
_PODMAN_HELPERS = {"conmon", "podman", "rootlessport", "rootlessport-ch", "slirp4netns", "pasta"}


@dataclass(frozen=True)
class StackView:
    name: str
    unit: str
    runtime: str
    port: int
    gpus: list[int]
    vendor: str
    container: str
    state: systemd.UnitState

    @property
    def running(self) -> bool:
        return self.state.running


def view(sf: StackFile, name: str) -> StackView:
    s = sf.get(name)
    return StackView(name=name, unit=unit_name(name), runtime=s.runtime, port=s.port, gpus=list(s.devices),
                     vendor=s.vendor, container=s.container_name, state=systemd.state(unit_name(name)))


def views(sf: StackFile) -> dict[str, StackView]:
    return {name: view(sf, name) for name in sorted(sf.stacks)}


def conflicting(sf: StackFile, name: str) -> list[str]:
    return sorted(conflicts(sf)[name])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def owner(sf: StackFile, holder: procs.Holder, containers: dict[str, str] | None = None) -> str | None:
    """The radiance stack a process belongs to (by its systemd unit, its podman container's cgroup,
    or podman's helper for its container), or None for a stranger."""
    unit = holder.unit()
    for name, s in sf.stacks.items():
        if unit == unit_name(name):
            return name
    by_name = {s.container_name: name for name, s in sf.stacks.items() if s.runtime == "podman"}
    if "libpod-" in holder.cgroup:
        for cid, cname in (podman.container_ids() if containers is None else containers).items():
            if f"libpod-{cid}" in holder.cgroup and cname in by_name:
                return by_name[cname]
    if holder.name in _PODMAN_HELPERS:
        cmd = _cmdline(holder.pid)
        for name, s in sf.stacks.items():
            if s.runtime == "podman" and s.container_name in cmd.split():
                return name
    return None


def strangers_on_port(sf: StackFile, port: int) -> list[procs.Holder]:
    return [h for h in procs.port_holders(port) if owner(sf, h) is None]


def still_held(sf: StackFile, stopped: list[str], target: str) -> list[str]:
    """What the stopped stacks (and the target's own port/GPUs) still hold; [] when all is free.

    The three field failures this waits out: a container not yet removed (#220 "name already in
    use"), a port still bound by a server that is shutting down (#827), GPU memory not yet freed (#97).
    """
    held = []
    t = sf.get(target)
    ports = {t.port} | {sf.get(n).port for n in stopped}
    for n in stopped:
        v = view(sf, n)
        if v.running:
            held.append(f"{v.unit} is still {v.state.active}")
        if v.runtime == "podman" and podman.container_exists(v.container):
            held.append(f"container {v.container} still exists ({podman.container_state(v.container)})")
    ids = podman.container_ids()
    for port in sorted(ports):
        # The target's own processes (it may already be starting) do not block its start.
        hs = [h for h in procs.port_holders(port) if owner(sf, h, ids) != target]
        if hs:
            held.append(f"port {port} is held by " + ", ".join(h.describe() for h in hs))
    gpu_list = sorted(set(t.devices))
    if gpu_list:
        # The driver's per-GPU list of memory holders. A stack that keeps running elsewhere cannot
        # appear on these GPUs unless it shares one (then it conflicts and was stopped); its
        # processes are skipped all the same, only the stopped stacks' and strangers' count.
        keep = {n for n, v in views(sf).items() if v.running and n not in stopped}
        try:
            hs = [h for h in gpus.holders(t.vendor, gpu_list) if owner(sf, h.holder, ids) not in keep]
        except gpus.GpuQueryError as e:
            hs, why = [], f"cannot tell whether GPU {','.join(map(str, gpu_list))} memory is released: {e}"
            held.append(why)
        if hs:
            held.append(f"GPU {','.join(map(str, gpu_list))} memory is held by " + ", ".join(h.describe() for h in hs))
    return held


def unit_home_mismatch(sf: StackFile, name: str) -> str | None:
    """Why this process and the stack's unit would disagree about models, state and the switch lock
    (a unit rendered for another RADIANCE_HOME), or None."""
    from radiance import paths

    env = systemd.environment(unit_name(name))
    theirs = env.get("RADIANCE_HOME")
    if theirs is None or Path(theirs) == paths.home():
        return None
    return (f"{unit_name(name)} runs with RADIANCE_HOME={theirs}, this command with {paths.home()}: they would "
            f"use different state and switch locks. Run with RADIANCE_HOME={theirs} (or re-render the units)")


def conflicts_of(sf: StackFile, a: str, b: str) -> list[str]:
    """What stacks a and b share (port, GPUs); [] when they can run together."""
    return conflicts(sf)[a].get(b, [])
