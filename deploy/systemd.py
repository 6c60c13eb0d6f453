"""systemctl / journalctl adapter. Every answer is read from systemd at the moment of asking."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass


class SystemdError(RuntimeError):
    pass


@dataclass(frozen=True)
class UnitState:
    unit: str
    load: str  # loaded / not-found / bad-setting ...
    active: str  # active / activating / deactivating / inactive / failed
    sub: str
    since: str  # ActiveEnterTimestamp (empty when never active)
    main_pid: int
    result: str  # success / exit-code / timeout ...

    @property
    def running(self) -> bool:
        """Holds (or is about to hold) its resources: anything but inactive/failed."""
        return self.active in ("active", "activating", "deactivating", "reloading")


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemdError(f"`{' '.join(args)}` failed ({r.returncode}): {(r.stderr or r.stdout).strip()}")
    return r


_PROPS = ("LoadState", "ActiveState", "SubState", "ActiveEnterTimestamp", "MainPID", "Result")


def state(unit: str) -> UnitState:
    out = _run("systemctl", "show", unit, *(f"--property={p}" for p in _PROPS)).stdout
    kv = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return UnitState(unit=unit, load=kv.get("LoadState", ""), active=kv.get("ActiveState", ""),
                     sub=kv.get("SubState", ""), since=kv.get("ActiveEnterTimestamp", ""),
                     main_pid=int(kv.get("MainPID") or 0), result=kv.get("Result", ""))


def start(unit: str) -> None:
    # --no-block: readiness is judged by the probe, not by systemd's job (Type=simple returns at once
    # anyway, and a long TimeoutStartSec would otherwise hold us here).
    _run("systemctl", "reset-failed", unit, check=False)
    _run("systemctl", "start", "--no-block", unit)


def stop(unit: str) -> None:
    """Blocks until systemd has stopped the unit (its TimeoutStopSec bounds this)."""
    _run("systemctl", "stop", unit)


def daemon_reload() -> None:
    _run("systemctl", "daemon-reload")


def journal_tail(unit: str, lines: int = 30) -> str:
    r = _run("journalctl", "-u", unit, "-n", str(lines), "--no-pager", "-o", "short-iso", check=False)
    return (r.stdout or r.stderr).rstrip()


def available() -> str | None:
    """None when systemd is PID 1 and answers; else why not."""
    try:
        comm = open("/proc/1/comm").read().strip()
    except OSError:
        comm = "?"
    if comm != "systemd":
        return f"PID 1 is {comm!r}, not systemd"
    r = _run("systemctl", "is-system-running", check=False)
    state_ = r.stdout.strip()
    return None if state_ in ("running", "degraded", "starting") else f"systemctl is-system-running: {state_}"
