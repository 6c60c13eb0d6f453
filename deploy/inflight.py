"""The requests a running stack is serving: vllm-switch waits for them before it stops the stack.

Read from each server's `/metrics` (radiance.vllm_load: requests running and waiting). The wait is
bounded (`--drain-timeout`) and says what it waits for every few seconds; `--force` skips it (the
requests then fail). A stack whose metrics cannot be read (still loading, or not answering) has no
requests to wait for, and the switch says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from radiance import probe
from radiance.deploy.unitspec import probe_url
from radiance.stack import StackFile
from radiance.vllm_load import Load

DRAIN_TIMEOUT_S = 300.0
PROGRESS_EVERY_S = 5.0
POLL_S = 1.0


def loads(sf: StackFile, names: list[str]) -> dict[str, Load | str]:
    """Each stack's load, or why it cannot be read."""
    return {n: probe.load(probe_url(sf.get(n)), timeout=5.0) for n in names}


def wait_idle(sf: StackFile, names: list[str], timeout_s: float, say: Callable[[str], None]) -> list[str]:
    """Wait until none of `names` runs or queues a request, at most `timeout_s`; the stacks still
    busy then ([] once idle)."""
    t0, said_at, unreadable = time.monotonic(), 0.0, set()
    while True:
        busy = {}
        for n, load in loads(sf, names).items():
            if isinstance(load, str):
                if n not in unreadable:
                    say(f"{n}: its requests cannot be read ({load}); not waiting for any")
                    unreadable.add(n)
            elif not load.idle:
                busy[n] = load
        if not busy:
            return []
        waited = time.monotonic() - t0
        if waited >= timeout_s:
            return sorted(busy)
        if not said_at or time.monotonic() - said_at >= PROGRESS_EVERY_S:
            said_at = time.monotonic()
            say("waiting for requests to finish before stopping: "
                + "; ".join(f"{n}: {load.describe()}" for n, load in sorted(busy.items()))
                + f" ({waited:.0f} s of {timeout_s:g} s; --force stops now)")
        time.sleep(POLL_S)
