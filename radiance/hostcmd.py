"""Run a host tool (podman, systemctl, journalctl) with a deadline: the one place that runs them
(deploy/, images/ and healthchecks/ all do, so it is the root package's).

A hung podman (a stuck storage lock, a dead conmon) or a systemd that stops answering on D-Bus
would otherwise hold `vllm-switch`'s lock for ever. Every call gets a timeout; on expiry the tool's
whole process group is killed (a tool that forked keeps our pipes open, and subprocess.run would
wait for them after killing only the child) and `HostCommandTimeout` names the command and the limit.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence

# podman / systemctl queries answer in well under a second on a healthy host.
QUERY_TIMEOUT_S = 30.0


class HostCommandError(RuntimeError):
    """A host tool failed or did not answer; the message names the command and what to check."""


class HostCommandTimeout(HostCommandError):
    pass


def run(argv: Sequence[str], *, timeout: float | None = None, check: bool = False,
        error: type[HostCommandError] = HostCommandError) -> subprocess.CompletedProcess:
    """Run `argv` capturing text output; raise `error` on a non-zero exit when `check`, and
    `HostCommandTimeout` when it does not finish within `timeout` seconds (default QUERY_TIMEOUT_S)."""
    argv = [str(a) for a in argv]
    timeout = QUERY_TIMEOUT_S if timeout is None else timeout
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise HostCommandTimeout(f"`{' '.join(argv)}` did not finish within {timeout:g} s and was killed; "
                          f"is {argv[0]} hung? (check `systemctl status` and the journal)") from None
    r = subprocess.CompletedProcess(argv, proc.returncode, out, err)
    if check and r.returncode != 0:
        raise error(f"`{' '.join(argv)}` failed ({r.returncode}): {(err or out).strip()}")
    return r
