"""systemctl / journalctl adapter. Every answer is read from systemd at the moment of asking.

Every call has a deadline (hostcmd.run): a systemd that stops answering fails the caller with the
command named, instead of holding vllm-switch's lock for ever.
"""

from __future__ import annotations

from dataclasses import dataclass

from radiance import hostcmd

# A stop takes at most the unit's own TimeoutStopSec; the caller waits that plus this margin for
# systemd's own bookkeeping.
STOP_MARGIN_S = 60.0


class SystemdError(hostcmd.HostCommandError):
    pass


@dataclass(frozen=True)
class UnitState:
    unit: str
    load: str  # loaded / not-found / bad-setting ...
    active: str  # active / activating / deactivating / inactive / failed
    sub: str
    since: str  # ActiveEnterTimestamp (empty when never active)
    main_pid: int
    result: str  # success / exit-code / timeout / start-limit-hit ...
    restarts: int = 0  # NRestarts: automatic restarts since the unit was last started by hand

    @property
    def running(self) -> bool:
        """Holds (or is about to hold) its resources: anything but inactive/failed."""
        return self.active in ("active", "activating", "deactivating", "reloading")


def _run(*args: str, check: bool = True, timeout: float | None = None):
    return hostcmd.run(args, timeout=timeout, check=check, error=SystemdError)


_PROPS = ("LoadState", "ActiveState", "SubState", "ActiveEnterTimestamp", "MainPID", "Result", "NRestarts")


def state(unit: str) -> UnitState:
    out = _run("systemctl", "show", unit, *(f"--property={p}" for p in _PROPS)).stdout
    kv = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return UnitState(unit=unit, load=kv.get("LoadState", ""), active=kv.get("ActiveState", ""),
                     sub=kv.get("SubState", ""), since=kv.get("ActiveEnterTimestamp", ""),
                     main_pid=int(kv.get("MainPID") or 0), result=kv.get("Result", ""),
                     restarts=int(kv.get("NRestarts") or 0))


def environment(unit: str) -> dict[str, str]:
    """The unit's Environment= settings (never its credentials: those are not environment)."""
    import shlex

    out = _run("systemctl", "show", unit, "--property=Environment", "--value").stdout.strip()
    return dict(kv.split("=", 1) for kv in shlex.split(out) if "=" in kv)


def exec_argv(unit: str) -> list[str]:
    """The unit's (last) ExecStart command as systemd has it, drop-ins applied: [program, args...].
    systemd prints the arguments space-joined, so an argument holding a space comes back split."""
    out = _run("systemctl", "show", unit, "--property=ExecStart", "--value").stdout
    cmds = [c for c in out.split("{")[1:] if "argv[]=" in c]
    if not cmds:
        return []
    fields = dict(f.strip().split("=", 1) for f in cmds[-1].rstrip("} \n").split(" ; ") if "=" in f)
    argv = fields.get("argv[]", "").split()
    return [fields.get("path", argv[0] if argv else ""), *argv[1:]]


def start(unit: str) -> None:
    # --no-block: readiness is judged by the probe, and a long TimeoutStartSec (the unit's
    # ExecStartPost waits for the ready probe) would otherwise hold us here.
    _run("systemctl", "reset-failed", unit, check=False)
    _run("systemctl", "start", "--no-block", unit)


def stop_no_block(unit: str) -> None:
    """Queue the stop and return: the caller polls `state` (and says what it waits for meanwhile);
    the unit's TimeoutStopSec bounds the stop itself."""
    _run("systemctl", "stop", "--no-block", unit)


def kill_main(unit: str, signal: str = "SIGKILL") -> None:
    """Signal the unit's main process only; with Restart=on-failure systemd restarts the unit."""
    _run("systemctl", "kill", f"--signal={signal}", "--kill-whom=main", unit)


def daemon_reload() -> None:
    _run("systemctl", "daemon-reload", timeout=120)


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
    try:
        r = _run("systemctl", "is-system-running", check=False)
    except hostcmd.HostCommandTimeout as e:
        return str(e)
    state_ = r.stdout.strip()
    return None if state_ in ("running", "degraded", "starting") else f"systemctl is-system-running: {state_}"
