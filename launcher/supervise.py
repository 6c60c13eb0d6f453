"""Run vLLM as the launcher's one child and report why it died (the last step of radiance-launch).

vLLM's API server exits 0 when its engine dies (it shuts down "cleanly" after the engine's error),
and its output ends in pages of exit-time noise, so neither a unit nor a person could tell a crash
from a stop. The launcher therefore stays as vLLM's parent: it passes vLLM's output through
unchanged, watches it for the first traceback (radiance/crash.py), forwards every stop signal, and
on exit says what killed the server and exits non-zero if it crashed.

Signals: SIGTERM/SIGINT/SIGHUP/SIGQUIT/SIGUSR1/SIGUSR2 go to vLLM; vLLM's own exit then ends the
launcher with vLLM's status (a signal death is passed on as that signal, or as 128+N where this
process is a container's PID 1 and cannot die of it). After a stop signal, vLLM's shutdown may print
a traceback of its own (its output handler sees the engine go); that is a stop, not a crash, so the
launcher then ends with vLLM's status and names the traceback only as shutdown noise.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping

from radiance.crash import CrashScanner

log = logging.getLogger("radiance.launch")

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
STOPS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def command(argv: list[str]) -> list[str]:
    """This module as a fresh interpreter running `argv` (-P: the working directory is not on sys.path)."""
    return [sys.executable, "-P", "-m", __name__, "--", *argv]


def run(argv: list[str], env: Mapping[str, str] | None = None, cwd: str | None = None) -> int:
    """Run `argv` to its end; the exit status this process should end with."""
    proc = subprocess.Popen(argv, env=None if env is None else dict(env), cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    tty_sends = _terminal_foreground()
    scanner = CrashScanner()
    stopped: list[signal.Signals] = []  # stop signals that came while the server had not crashed

    def on_signal(sig: int, forward: bool) -> None:
        if sig in STOPS and scanner.crash is None:
            stopped.append(signal.Signals(sig))
        if forward:
            proc.send_signal(sig)

    for sig in FORWARDED:
        # Ctrl-C / Ctrl-\ reach vLLM from the terminal already: once is a stop, twice a kill
        tty = sig in (signal.SIGINT, signal.SIGQUIT) and tty_sends
        signal.signal(sig, lambda s, _frame, fwd=not tty: on_signal(s, fwd))
    out = sys.stdout.buffer
    assert proc.stdout is not None
    for raw in iter(proc.stdout.readline, b""):
        out.write(raw)
        out.flush()
        scanner.feed(raw.decode("utf-8", "replace"))
    rc = proc.wait()
    for sig in FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    if scanner.crash is not None and stopped:
        log.info("vLLM stopped on %s; its shutdown printed: %s", stopped[0].name, scanner.crash.summary())
    elif scanner.crash is not None:
        log.error("the server died: %s", scanner.crash.summary())
        return rc if rc > 0 else 1
    if rc < 0:
        log.info("vLLM ended by signal %s", signal.Signals(-rc).name)
        return _die_of(-rc)
    if rc:
        log.error("vLLM exited with status %d (no traceback in its output; its last lines are above)", rc)
    return rc


def _terminal_foreground() -> bool:
    """This process group is a terminal's foreground job (so the terminal signals vLLM itself)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _die_of(sig: int) -> int:
    """End as vLLM ended (a unit counts a SIGTERM death as a clean stop); PID 1 cannot, so 128+N."""
    sys.stdout.flush()
    sys.stderr.flush()
    if os.getpid() != 1:
        os.kill(os.getpid(), sig)
    return 128 + sig


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.exit("usage: python -m radiance.launcher.supervise -- COMMAND [ARG...]")
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("radiance-launch: %(message)s"))
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    sys.exit(run(args))


if __name__ == "__main__":
    main()
