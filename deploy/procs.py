"""Who holds a TCP port, and what a PID is, read from /proc (no psutil; Linux only).

vllm-switch uses this to wait until a stopped stack has really let go of its port, to name a
stranger that holds a port (PID and process name) instead of killing it, and to name the
processes the GPU driver lists (gpus.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

_LISTEN = "0A"


@dataclass(frozen=True)
class Holder:
    pid: int
    name: str
    cgroup: str  # the unified/systemd cgroup path: tells a radiance unit's process from a stranger

    def describe(self) -> str:
        return f"PID {self.pid} ({self.name})"

    def unit(self) -> str | None:
        """The systemd unit this process runs under, e.g. `radiance-paro.service`, if any."""
        for part in reversed(self.cgroup.split("/")):
            if part.endswith(".service") or part.endswith(".scope"):
                return part
        return None


def _listen_inodes(port: int, proc: Path) -> set[str]:
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == _LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f[9])
    return inodes


def process(pid: int, proc: Path = Path("/proc")) -> Holder:
    """Name and cgroup of a PID; a PID this /proc does not show (another PID namespace, or gone)
    keeps its number with the name saying so."""
    base = proc / str(pid)
    try:
        name = (base / "comm").read_text().strip()
    except OSError:
        name = "not visible in /proc"
    # systemd's own hierarchy names the unit: `name=systemd` on cgroup v1/hybrid hosts (where the
    # unified `0::` line may stop at the container's cgroup), `0::` on pure cgroup v2.
    found: dict[str, str] = {}
    try:
        for line in (base / "cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            found[controllers] = path
    except (OSError, ValueError):
        pass
    cgroup = found.get("name=systemd") or found.get("", "")
    return Holder(pid=pid, name=name, cgroup=cgroup)


def _fd_targets(pid_dir: Path):
    try:
        fds = list((pid_dir / "fd").iterdir())
    except OSError:  # the process exited or is not ours to read
        return
    for fd in fds:
        try:
            yield os.readlink(fd)
        except OSError:
            continue


def _pids(proc: Path):
    for d in proc.iterdir():
        if d.name.isdigit():
            yield int(d.name), d


def port_holders(port: int, proc: Path = Path("/proc")) -> list[Holder]:
    """Processes with a listening TCP socket on `port` (any address, IPv4 or IPv6)."""
    inodes = _listen_inodes(port, proc)
    if not inodes:
        return []
    wanted = {f"socket:[{i}]" for i in inodes}
    holders = [process(pid, proc) for pid, d in _pids(proc) if any(t in wanted for t in _fd_targets(d))]
    if not holders:  # a listener whose owner we cannot see (another namespace): still held
        holders = [Holder(pid=0, name="unknown (not visible in /proc)", cgroup="")]
    return holders


def port_in_use(port: int, proc: Path = Path("/proc")) -> bool:
    return bool(_listen_inodes(port, proc))
