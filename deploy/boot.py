"""What comes back after a reboot: exactly the stacks `vllm-switch` left running.

Stack units carry no `[Install]` section: enabled (or, for Quadlet, generated with `WantedBy=`),
every stack would be started at boot, and stacks that share GPUs or a port would race there while
systemd's `Conflicts=` picks a survivor. Instead `vllm-switch` keeps one drop-in of
`multi-user.target`, `radiance-boot.conf`, whose `Wants=` names the stacks it left running: a
switch to NAME puts NAME in and takes out what it stopped, `vllm-switch stop` takes out what it
stopped, a failed switch takes out what is no longer running. At boot systemd reads it like any
drop-in, for native units and Quadlet-generated ones alike. Only `vllm-switch` writes it, under its
lock; it holds the operator's choice, not a record of what runs (that is read from systemd).
"""

from __future__ import annotations

from pathlib import Path

from radiance import atomic
from radiance.deploy import systemd

DROPIN = Path("/etc/systemd/system/multi-user.target.d/radiance-boot.conf")
_HEADER = ("# Written by vllm-switch: the radiance stacks it left running, started again at boot.\n"
           "# `vllm-switch NAME` and `vllm-switch stop` change it; do not edit.\n")


def chosen(path: Path = DROPIN) -> list[str]:
    """The units the drop-in names (none when there is no drop-in)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [u for line in text.splitlines() if line.startswith("Wants=") for u in line.removeprefix("Wants=").split()]


def text_for(units: list[str]) -> str:
    return _HEADER + "[Unit]\n" + "".join(f"Wants={u}\n" for u in sorted(set(units)))


def update(add: list[str] = (), remove: list[str] = (), path: Path = DROPIN) -> list[str]:
    """Put `add` into the boot choice and take `remove` out; the units chosen now. systemd is told
    (daemon-reload) only when the drop-in changed, so `systemctl show multi-user.target` agrees."""
    before = chosen(path)
    after = sorted((set(before) - set(remove)) | set(add))
    if after == sorted(set(before)) and (after or not path.exists()):
        return after
    if after:
        atomic.write_text(path, text_for(after), mode=0o644)
    else:
        path.unlink(missing_ok=True)
    systemd.daemon_reload()
    return after
